"""Restart costs: the arithmetic, the built-in model for every known job type, the profile rows."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tesserae.core.errors import InputError
from tesserae.core.restart import DEFAULT_STORAGE_GBPS, RestartCost, transfer_seconds
from tesserae.profiler.catalogue import MODEL_NAMES
from tesserae.profiles.default_model import DefaultModel, DefaultModelConfig
from tesserae.profiles.loader import load_profile
from tesserae.profiles.norm_speed import load_norm_speed
from tesserae.profiles.restart_model import BLOX, COMMON, GAVEL, STARTUP_SECONDS, builtin_restart_cost
from tesserae.profiles.table_model import TableModel
from tesserae.profiles.tesserae_profile import (
    MEASURED_SOURCE,
    tesserae_profile_document,
    tesserae_profile_from_document,
)

ALONE = {("A", 1, "v100", True): 1.0, ("vgg19", 1, "v100", True): 2.0}


def test_cost_is_startup_plus_bytes_over_bandwidth() -> None:
    assert transfer_seconds(1.25e9, 10.0) == pytest.approx(1.0)  # 10 Gbit/s moves 1.25 GB a second
    assert transfer_seconds(1e9, 8.0) == pytest.approx(1.0)
    cost = RestartCost(checkpoint_bytes=2.5e9, startup_seconds=7.0, measured=True)
    assert cost.seconds(10.0) == pytest.approx(9.0)
    assert cost.seconds(40.0) == pytest.approx(7.5)
    assert cost.seconds() == cost.seconds(DEFAULT_STORAGE_GBPS)
    with pytest.raises(ValueError, match="storage bandwidth"):
        cost.seconds(0.0)
    with pytest.raises(ValueError, match="checkpoint_bytes"):
        RestartCost(checkpoint_bytes=-1.0, startup_seconds=1.0, measured=False)
    with pytest.raises(ValueError, match="startup_seconds"):
        RestartCost(checkpoint_bytes=1.0, startup_seconds=float("nan"), measured=False)


def test_checkpoint_bytes_are_weights_plus_optimizer_state() -> None:
    # SGD with momentum: 4 bytes of weight + 4 of momentum; Adam: + 8; plain SGD: weights only.
    assert COMMON["resnet50"].checkpoint_bytes == 25_557_032 * 8
    assert BLOX["bertlarge"].checkpoint_bytes == 340_000_000 * 12
    assert GAVEL["lm"].checkpoint_bytes == 13_987_678 * 4
    assert GAVEL["a3c"].checkpoint_bytes == 3_249_639 * 16  # AMSGrad keeps a third moment
    bert = load_norm_speed_model().restart_cost("Bert-Large")
    assert bert is not None and bert.checkpoint_bytes == 340_000_000 * 12
    assert bert.seconds(10.0) == pytest.approx(STARTUP_SECONDS + 340e6 * 12 * 8 / 10e9)


def load_norm_speed_model() -> TableModel:
    here = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "blox" / "norm_speed.csv"
    if not here.is_file():
        pytest.skip("shared data is missing")
    return load_norm_speed(here)


def _known_job_types(shared: Path) -> dict[str, list[str]]:
    gavel = load_profile(shared / "gavel" / "simulation_throughputs.json")
    blox = load_profile(shared / "blox" / "norm_speed.csv")
    with (shared / "tiresias" / "60_job.csv").open() as f:
        tiresias = sorted({row["model_name"] for row in csv.DictReader(f)})
    return {"gavel": gavel.job_types(), "blox": blox.job_types(), "tiresias": tiresias,
            "default": DefaultModel().job_types(), "catalogue": list(MODEL_NAMES)}


def test_every_job_type_the_project_knows_has_a_labelled_model_cost(shared_data: Path) -> None:
    models = {"gavel": load_profile(shared_data / "gavel" / "simulation_throughputs.json"),
              "blox": load_profile(shared_data / "blox" / "norm_speed.csv")}
    for source, types in _known_job_types(shared_data).items():
        model = models.get(source, DefaultModel())
        assert types
        for jt in types:
            cost = model.restart_cost(jt)
            assert cost is not None, f"{source}: {jt} has no restart cost"
            assert not cost.measured and cost.source.startswith("model")
            assert cost.parameters and cost.checkpoint_bytes >= 4 * cost.parameters
            assert model.restart_seconds(jt, 1) == pytest.approx(cost.seconds())


def test_each_source_has_its_own_models(shared_data: Path) -> None:
    gavel = load_profile(shared_data / "gavel" / "simulation_throughputs.json")
    # Gavel's ResNet-18 is the CIFAR-10 network and its Recommendation an autoencoder, not the catalogue's.
    assert gavel.restart_cost("ResNet-18 (batch size 32)").parameters == 11_173_962
    assert DefaultModel().restart_cost("resnet18").parameters == 11_689_512
    assert gavel.restart_cost("Recommendation (batch size 512)").parameters == 8_063_508
    assert DefaultModel().restart_cost("recommendation").parameters == 10_707_009


def test_catalogue_counts_match_the_built_networks() -> None:
    torch = pytest.importorskip("torch")
    from tesserae.profiler.catalogue import size_settings
    from tesserae.profiler.models import build

    for name in MODEL_NAMES:
        expected = builtin_restart_cost(name).parameters
        built = build(name, "full", torch.device("meta")).parameters  # no memory, no time
        if name in ("gpt-small", "bert-base"):
            # On the meta device the output layer no longer shares the token embedding: count it twice.
            s = size_settings(name, "full")
            expected += s["vocab"] * s["dim"]
        assert built == expected, name


def test_unknown_job_type_is_a_clear_error() -> None:
    assert DefaultModel().restart_cost("mystery-net") is None
    with pytest.raises(InputError, match="'mystery-net' has no restart cost in profile default-model"):
        DefaultModel().restart_seconds("mystery-net", 1)


def test_default_model_configuration_overrides() -> None:
    model = DefaultModel(DefaultModelConfig(startup_seconds=5.0, checkpoint_bytes={"vgg19": 2.5e9, "mine": 0.0}))
    assert model.restart_seconds("vgg19", 1, 10.0) == pytest.approx(7.0)
    assert model.restart_seconds("mine", 4) == pytest.approx(5.0)
    assert model.restart_seconds("resnet50", 1, 10.0) == pytest.approx(5.0 + 25_557_032 * 8 * 8 / 10e9)
    assert not model.restart_cost("mine").measured


def _doc(restart: list[dict]) -> dict:
    return {"format": "tesserae-profile", "version": 1, "reference_gpu_type": "v100",
            "entries": [{"job_type": "A", "num_gpus": 1, "gpu_type": "v100", "consolidated": True,
                         "throughput": 1.0}], "restart": restart}


def test_profile_round_trip_keeps_measured_restart_rows() -> None:
    measured = RestartCost(123_456.0, 4.5, measured=True, source=MEASURED_SOURCE, save_seconds=0.25,
                           restore_seconds=0.125, parameters=10_000)
    model = TableModel(name="t", reference_gpu_type="v100", alone=ALONE, restart={"A": measured})
    doc = json.loads(json.dumps(tesserae_profile_document(model)))
    assert doc["restart"] == [{"job_type": "A", "checkpoint_bytes": 123_456, "startup_seconds": 4.5,
                               "save_seconds": 0.25, "restore_seconds": 0.125, "parameters": 10_000}]
    back = tesserae_profile_from_document(doc)
    assert back == model
    cost = back.restart_cost("A")
    assert cost is not None and cost.measured and (cost.save_seconds, cost.restore_seconds) == (0.25, 0.125)
    # A job type without a row falls back to the built-in model (and is not written back as measured).
    assert not back.restart_cost("vgg19").measured
    assert [r["job_type"] for r in tesserae_profile_document(back)["restart"]] == ["A"]


def test_old_profiles_without_restart_rows_still_load() -> None:
    doc = _doc([])
    del doc["restart"]
    model = tesserae_profile_from_document(doc)
    assert model.restart == {} and model.restart_cost("A") is None


@pytest.mark.parametrize(("rows", "field", "message"), [
    ([{"job_type": "A", "checkpoint_bytes": -1, "startup_seconds": 1.0}], "restart[0].checkpoint_bytes",
     "greater than or equal to 0"),
    ([{"job_type": "A", "checkpoint_bytes": 1.5, "startup_seconds": 1.0}], "restart[0].checkpoint_bytes",
     "integer"),
    ([{"job_type": "A", "checkpoint_bytes": 10, "startup_seconds": "fast"}], "restart[0].startup_seconds",
     "number"),
    ([{"job_type": "A", "checkpoint_bytes": 10}], "restart[0].startup_seconds", "required"),
    ([{"job_type": "A", "checkpoint_bytes": 10, "startup_seconds": 1.0, "save_seconds": -2.0}],
     "restart[0].save_seconds", "greater than or equal to 0"),
    ([{"job_type": "A", "checkpoint_bytes": 10, "startup_seconds": 1.0, "speed": 3}], "restart[0].speed",
     "not permitted"),
    ([{"job_type": "A", "checkpoint_bytes": 10, "startup_seconds": 1.0},
      {"job_type": "A", "checkpoint_bytes": 20, "startup_seconds": 2.0}], "restart[1].job_type", "duplicate"),
])
def test_bad_restart_rows_name_the_file_and_field(tmp_path: Path, rows: list[dict], field: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_doc(rows)))
    with pytest.raises(InputError) as err:
        load_profile(path)
    text = str(err.value)
    assert str(path) in text and f"field '{field}'" in text and message in text.lower()
