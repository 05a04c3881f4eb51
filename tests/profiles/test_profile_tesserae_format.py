"""The project's own profile format: writer/reader round trip and field-precise validation errors."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tesserae.core.errors import InputError
from tesserae.profiles.colocation import ColocationTable
from tesserae.profiles.gavel import read_gavel
from tesserae.profiles.table_model import ANY_GPU, TableModel
from tesserae.profiles.tesserae_profile import (
    read_tesserae_profile,
    tesserae_profile_document,
    tesserae_profile_from_document,
    write_tesserae_profile,
)

GPU = {"name": "NVIDIA H200", "driver": "550.54.15", "torch_version": "2.4.0", "date": "2025-06-01",
       "gpu_type": "h200"}


def small_model() -> TableModel:
    return TableModel(
        name="small", reference_gpu_type="h200",
        alone={("A", 1, "h200", True): 10.0, ("A", 2, "h200", True): 19.5, ("A", 2, "h200", False): 15.0,
               ("B", 1, "h200", True): 4.0},
        pairs={("A", 1, "h200", True, "B", 1): (6.0, 3.0), ("A", 2, "h200", True, "A", 2): (0.0, 0.0)},
        memory={("A", 1, "h200", True): 12.5}, skew={"A": 0.2}, metadata=GPU)


def valid_doc() -> dict:
    return tesserae_profile_document(small_model())


def test_round_trip(tmp_path):
    model = small_model()
    path = tmp_path / "profile.json"
    write_tesserae_profile(model, path)
    back = read_tesserae_profile(path)
    assert back == model
    assert back.metadata == GPU
    assert back.rate("A", 1, "h200", partner=("B", 1)) == 6.0
    assert back.memory_gb("A") == 12.5
    assert back.skew("A") == 0.2
    doc = json.loads(path.read_text())
    assert doc["format"] == "tesserae-profile" and doc["version"] == 1
    assert doc["gpu"] == GPU
    assert {p["oom"] for p in doc["pairs"]} == {True, False}


def test_round_trip_with_strategies(tmp_path):
    table = ColocationTable(
        solo={("L", 2): [("10,14", 0.8), ("DP24", 1.0)]},
        pairs={("L", 2, "10,14", "S", 2): (0.7, 0.9), ("L", 2, "DP24", "S", 2): None})
    model = TableModel(name="m", reference_gpu_type="v100",
                       alone={("L", 2, ANY_GPU, True): 1.0, ("S", 2, ANY_GPU, True): 1.0},
                       pairs={("L", 2, ANY_GPU, True, "S", 2): (0.7, 0.9)}, colocation=table)
    path = tmp_path / "p.json"
    write_tesserae_profile(model, path, gpu=GPU)
    back = read_tesserae_profile(path)
    assert back == model
    assert back.colocation == table
    assert back.strategy_for("L", 2, ("S", 2)) == "10,14"


def test_gavel_converts_losslessly(tmp_path, gavel_model):
    path = tmp_path / "gavel_as_tesserae.json"
    write_tesserae_profile(gavel_model, path)
    assert read_tesserae_profile(path) == gavel_model


def test_gavel_tiny_converts_losslessly(tmp_path, tiny_gavel_path):
    model = read_gavel(tiny_gavel_path)
    path = tmp_path / "p.json"
    write_tesserae_profile(model, path)
    back = read_tesserae_profile(path)
    assert back == model
    assert back.rate("A", 4, "v100", consolidated=False) == model.rate("A", 4, "v100", consolidated=False)


def _error(doc: dict, tmp_path) -> InputError:
    path = tmp_path / "bad_profile.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as exc:
        read_tesserae_profile(path)
    assert "bad_profile.json" in str(exc.value)
    return exc.value


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda d: d["entries"][0].update(throughput="fast"), "entries[0].throughput"),
    (lambda d: d["entries"][1].update(throughput=-1.0), "entries[1].throughput"),
    (lambda d: d["entries"][0].update(num_gpus=0), "entries[0].num_gpus"),
    (lambda d: d["entries"][0].update(num_gpus="2"), "entries[0].num_gpus"),
    (lambda d: d["entries"][0].update(consolidated=1), "entries[0].consolidated"),
    (lambda d: d["entries"][0].update(speed=3.0), "entries[0].speed"),
    (lambda d: d["entries"][0].pop("gpu_type"), "entries[0].gpu_type"),
    (lambda d: d["pairs"][0].update(partner_throughput=None), "pairs[0].partner_throughput"),
    (lambda d: d["gpu"].update(driver=550), "gpu.driver"),
    (lambda d: d.update(version=2), "version"),
    (lambda d: d.update(extra=True), "extra"),
    (lambda d: d["skew"].update(A=1.5), "skew.A"),
    (lambda d: d.update(strategies=[{"job_type": "L", "num_gpus": 2, "strategy": "x", "speed": "y"}]),
     "strategies[0].speed"),
])
def test_bad_field_names_json_path(tmp_path, mutate, field):
    doc = copy.deepcopy(valid_doc())
    mutate(doc)
    err = _error(doc, tmp_path)
    assert err.field == field
    assert f"'{field}'" in str(err)


def test_semantic_errors(tmp_path):
    doc = valid_doc()
    doc["entries"].append(dict(doc["entries"][0]))
    assert _error(doc, tmp_path).field == f"entries[{len(doc['entries']) - 1}]"
    doc = valid_doc()
    doc["strategies"] = [{"job_type": "L", "num_gpus": 2, "strategy": "x", "speed": 0.5,
                          "partner_type": "S"}]
    assert _error(doc, tmp_path).field == "strategies[0].partner_speed"
    doc = valid_doc()
    doc["entries"][0]["gpu_type"] = ANY_GPU
    assert "mixes" in str(_error(doc, tmp_path))


def test_invalid_json_names_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{\n  "format": "tesserae-profile",\n  oops\n}')
    with pytest.raises(InputError, match="line 3"):
        read_tesserae_profile(path)


_names = st.sampled_from(["A", "B", "ResNet-50 (batch size 32)", "vgg19"])
_rates = st.floats(min_value=0.0, max_value=1e4, allow_nan=False, allow_infinity=False)
_alone_keys = st.tuples(_names, st.sampled_from([1, 2, 4]), st.sampled_from(["v100", "k80"]), st.booleans())


@settings(max_examples=60, deadline=None)
@given(alone=st.dictionaries(_alone_keys, _rates, min_size=1, max_size=12),
       pair_list=st.lists(st.tuples(_alone_keys, _names, st.sampled_from([1, 2, 4]), _rates, _rates),
                          max_size=8))
def test_round_trip_property(alone, pair_list):
    pairs = {(k[0], k[1], k[2], k[3], pt, pn): (a, b) for k, pt, pn, a, b in pair_list}
    model = TableModel(name="p", reference_gpu_type="v100", alone=alone, pairs=pairs)
    doc = json.loads(json.dumps(tesserae_profile_document(model)))
    back = tesserae_profile_from_document(doc)
    assert back == model
    for jt in model.job_types():
        for n in model.gpu_counts(jt):
            for g in model.gpu_types():
                assert back.rate(jt, n, g, False) == model.rate(jt, n, g, False)
