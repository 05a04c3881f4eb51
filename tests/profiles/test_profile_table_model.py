"""TableModel on a tiny Gavel-style table: alone, unconsolidated, pairs, missing data, check()."""

from __future__ import annotations

import pytest

from tesserae.core.errors import InputError
from tesserae.core.throughput import ThroughputModel
from tesserae.profiles.colocation import ColocationTable
from tesserae.profiles.gavel import read_gavel
from tesserae.profiles.table_model import (
    ANY_GPU,
    UNCONSOLIDATED_FALLBACK_FACTOR,
    TableModel,
    model_family,
    tiresias_skew,
)

R50 = "ResNet-50 (batch size 64)"


@pytest.fixture
def model(tiny_gavel_path):
    return read_gavel(tiny_gavel_path)


def test_is_a_throughput_model(model):
    assert isinstance(model, ThroughputModel)
    assert model.measured is True
    assert model.reference_gpu_type == "v100"
    assert model.job_types() == ["A", "B", R50]
    assert model.gpu_types() == ["k80", "v100"]
    assert model.gpu_counts("A") == [1, 2, 4]


def test_alone_consolidated(model):
    assert model.rate("A", 1, "v100") == 10.0
    assert model.rate("A", 2, "v100") == 18.0
    assert model.rate("A", 1, "k80") == 3.0
    assert model.reference_rate("A", 4) == 30.0


def test_alone_unconsolidated_measured_and_fallback(model):
    assert model.rate("A", 2, "v100", consolidated=False) == 12.0
    # not in the table: consolidated x the documented factor
    expected = 30.0 * UNCONSOLIDATED_FALLBACK_FACTOR
    assert model.rate("A", 4, "v100", consolidated=False) == pytest.approx(expected)
    # a one-GPU job cannot be spread: same as consolidated
    assert model.rate("B", 1, "v100", consolidated=False) == 5.0


def test_pairs_both_directions(model):
    assert model.rate("A", 1, "v100", partner=("B", 1)) == 6.0
    assert model.rate("B", 1, "v100", partner=("A", 1)) == 3.0
    assert model.rate("A", 2, "v100", partner=("B", 2)) == 9.0


def test_unconsolidated_pair_scaled_by_own_spread_ratio(model):
    assert model.rate("A", 2, "v100", False, ("B", 2)) == pytest.approx(9.0 * 12.0 / 18.0)
    assert model.rate("B", 2, "v100", False, ("A", 2)) == pytest.approx(4.0 * UNCONSOLIDATED_FALLBACK_FACTOR)


def test_zero_and_missing_pairs_cannot_share(model):
    assert model.rate("A", 1, "v100", partner=(R50, 1)) == 0.0  # listed as [0, 0]
    assert model.rate(R50, 1, "v100", partner=("A", 1)) == 0.0
    assert model.rate("B", 1, "v100", partner=(R50, 1)) == 0.0  # not listed at all
    assert model.rate("A", 1, "k80", partner=("B", 1)) == 0.0  # no pairs measured on k80


def test_pair_fits_consistent_with_rate(model):
    for a in model.job_types():
        for b in model.job_types():
            for g in model.gpu_types():
                for n in (1, 2):
                    if n in model.gpu_counts(a) and n in model.gpu_counts(b):
                        assert model.pair_fits(a, b, g, n, n) == (model.rate(a, n, g, partner=(b, n)) > 0)
    assert model.pair_fits("A", "B", "v100")
    assert not model.pair_fits("A", R50, "v100")
    assert not model.pair_fits("A", "B", "k80")


def test_missing_gpu_count_is_not_invented(model):
    reason = model.check("A", 3)
    assert reason is not None and "3 GPUs" in reason and "1, 2, 4" in reason
    assert model.check("A", 8) is not None  # above the largest measured count
    assert model.check("B", 4) is not None
    with pytest.raises(InputError, match="3 GPUs"):
        model.rate("A", 3, "v100")


def test_unknown_job_type_raises_naming_it(model):
    assert "'Z'" in model.check("Z", 1)
    with pytest.raises(InputError, match="'Z'"):
        model.rate("Z", 1, "v100")
    with pytest.raises(InputError, match="'Z'"):
        model.rate("A", 1, "v100", partner=("Z", 1))


def test_check_gpu_types(model):
    assert model.check("A", 1) is None
    assert model.check("A", 1, "k80") is None
    assert "h100" in model.check("A", 1, "h100")
    with pytest.raises(InputError, match="h100"):
        model.rate("A", 1, "h100")
    # measured on v100 only: reads 0.0 on k80 and check() says it cannot run there
    assert model.rate("A", 2, "k80") == 0.0
    assert "cannot run" in model.check("A", 2, "k80")


def test_check_needs_positive_reference_rate():
    m = TableModel(name="t", reference_gpu_type="v100",
                   alone={("A", 1, "v100", True): 0.0, ("A", 1, "k80", True): 2.0})
    assert "reference" in m.check("A", 1)
    assert m.check("A", 1, "k80") is None


def test_skew_and_memory(model):
    assert model.skew(R50) == 0.11
    assert model.skew("A") is None
    assert model.memory_gb("A") is None
    m = TableModel(name="t", reference_gpu_type="v100", alone={("A", 1, "v100", True): 1.0,
                                                               ("A", 2, "v100", True): 1.0},
                   memory={("A", 1, "v100", True): 5.0, ("A", 2, "v100", True): 3.0}, skew={"A": 0.3})
    assert m.memory_gb("A") == 5.0
    assert m.memory_gb("A", 2) == 3.0
    assert m.memory_gb("A", 4) is None
    assert m.skew("A") == 0.3


@pytest.mark.parametrize(("name", "family"), [
    ("ResNet-50 (batch size 16)", "resnet50"), ("VGG-19", "vgg19"), ("Inception-v3", "inception3"),
    ("resnet50 (batch size 32)", "resnet50"), ("AlexNet", "alexnet"), ("ResNet-101", "resnet101"),
])
def test_model_family(name, family):
    assert model_family(name) == family
    assert tiresias_skew(name) is not None


def test_any_gpu_table_answers_for_every_gpu_type():
    m = TableModel(name="t", reference_gpu_type="v100", alone={("A", 1, ANY_GPU, True): 2.0},
                   pairs={("A", 1, ANY_GPU, True, "A", 1): (1.5, 1.5)})
    assert m.rate("A", 1, "h100") == 2.0
    assert m.rate("A", 1, "a100", partner=("A", 1)) == 1.5
    assert m.check("A", 1, "anything") is None
    assert m.gpu_types() == [ANY_GPU]


def test_mixing_any_gpu_with_named_types_is_an_error():
    with pytest.raises(InputError, match="mixes"):
        TableModel(name="t", reference_gpu_type="v100",
                   alone={("A", 1, ANY_GPU, True): 2.0, ("A", 1, "v100", True): 1.0})


def test_one_sided_zero_pair_means_cannot_share():
    m = TableModel(name="t", reference_gpu_type="v100",
                   alone={("A", 1, "v100", True): 2.0, ("B", 1, "v100", True): 2.0},
                   pairs={("A", 1, "v100", True, "B", 1): (1.0, 0.0)})
    assert m.rate("A", 1, "v100", partner=("B", 1)) == 0.0
    assert m.rate("B", 1, "v100", partner=("A", 1)) == 0.0
    assert not m.pair_fits("A", "B", "v100")


def test_strategy_for_without_and_with_colocation(model):
    assert model.strategy_for("A", 1) is None
    table = ColocationTable(solo={("L", 2): [("a", 0.8), ("b", 1.0)]},
                            pairs={("L", 2, "a", "S", 2): (0.7, 0.9), ("L", 2, "b", "S", 2): (0.6, 0.5)})
    m = TableModel(name="t", reference_gpu_type="v100", alone={("L", 2, ANY_GPU, True): 1.0},
                   colocation=table)
    assert m.strategy_for("L", 2) == "b"
    assert m.strategy_for("L", 2, ("S", 2)) == "a"
    assert m.strategy_for("L", 2, ("T", 2)) is None


def test_gavel_reader_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"v100": {"A, 1": {"null": 1.0}}}')
    with pytest.raises(InputError, match="A, 1") as exc:
        read_gavel(bad)
    assert "bad.json" in str(exc.value)
    bad.write_text('{"v100": {"(\'A\', 1)": {"null": -1.0}}}')
    with pytest.raises(InputError, match="null"):
        read_gavel(bad)
    bad.write_text('{"v100": {"(\'A\', 1)": {"null": 1.0, "(\'B\', 1)": [1.0]}}}')
    with pytest.raises(InputError, match="B"):
        read_gavel(bad)
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        read_gavel(bad)
    bad.write_bytes(b'{"v100": "\xff\xfe"}')
    with pytest.raises(InputError, match="not UTF-8") as exc:
        read_gavel(bad)
    assert "bad.json" in str(exc.value)


def test_check_reports_missing_reference_gpu_type():
    m = TableModel(name="t", reference_gpu_type="v100", alone={("A", 1, "h200", True): 3.0})
    reason = m.check("A", 1)
    assert reason is not None and "reference" in reason and "v100" in reason
    assert m.check("A", 1, "h200") is None
