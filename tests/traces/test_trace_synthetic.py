"""The synthetic default workload: determinism, offered load, mixes and durations."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tesserae.core.cluster import parse_cluster_spec
from tesserae.core.errors import InputError
from tesserae.profiles.default_model import DefaultModel
from tesserae.traces import generate_workload, trace_info
from tesserae.traces.synthetic import GPU_MIXES, arrival_rate, expected_duration, parse_gpu_mix

MODEL = DefaultModel()
CLUSTER = parse_cluster_spec("16x4")


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 60), load=st.floats(0.05, 3.0))
@settings(max_examples=30, deadline=None)
def test_deterministic_and_well_formed(seed: int, n: int, load: float) -> None:
    a = generate_workload(n, load, CLUSTER, MODEL, seed)
    assert a == generate_workload(n, load, CLUSTER, MODEL, seed)
    assert [j.job_id for j in a] == list(range(n))
    if n:
        assert a[0].submit_time == 0.0
        assert all(x.submit_time <= y.submit_time for x, y in itertools.pairwise(a))
    for j in a:
        assert j.num_gpus in (1, 2, 4, 8)
        assert j.job_type in MODEL.job_types()
        assert j.duration is not None and 60 * 10**1.5 <= j.duration <= 60 * 10**4
        assert j.work == j.duration * MODEL.reference_rate(j.job_type, j.num_gpus)


def test_seeds_differ() -> None:
    assert generate_workload(50, 0.9, CLUSTER, MODEL, 1) != generate_workload(50, 0.9, CLUSTER, MODEL, 2)


@pytest.mark.parametrize("mix", ["gavel", "blox"])
@pytest.mark.parametrize("load", [0.5, 1.0, 2.0])
def test_offered_load_close_to_target(mix: str, load: float) -> None:
    jobs = generate_workload(40_000, load, CLUSTER, MODEL, seed=11, gpu_mix=mix)
    realised = trace_info(jobs, CLUSTER)["cluster"]["offered_load"]
    assert realised == pytest.approx(load, rel=0.05)


@pytest.mark.parametrize("mix", ["gavel", "blox"])
def test_gpu_mix_proportions(mix: str) -> None:
    jobs = generate_workload(40_000, 1.0, CLUSTER, MODEL, seed=3, gpu_mix=mix)
    share = {g: v["share"] for g, v in trace_info(jobs)["gpu_mix"].items()}
    for g, p in GPU_MIXES[mix].items():
        assert share[g] == pytest.approx(p, abs=0.01)


def test_duration_mix_and_types() -> None:
    jobs = generate_workload(40_000, 1.0, CLUSTER, MODEL, seed=4)
    d = np.array([j.duration for j in jobs])
    assert (d > 60 * 10**3).mean() == pytest.approx(0.2, abs=0.01)
    assert d.mean() == pytest.approx(expected_duration("philly"), rel=0.03)
    counts = np.unique([j.job_type for j in jobs], return_counts=True)[1]
    assert len(counts) == len(MODEL.job_types())
    assert counts.min() / counts.max() > 0.9


def test_gpu_counts_capped_at_cluster_size() -> None:
    small = parse_cluster_spec("1x2")
    jobs = generate_workload(2_000, 0.5, small, MODEL, seed=0)
    assert {j.num_gpus for j in jobs} == {1, 2}
    assert trace_info(jobs, small)["cluster"]["too_large"] == 0


def test_arrival_rate_formula() -> None:
    mean_gpus = 0.7 * 1 + 0.1 * 2 + 0.15 * 4 + 0.05 * 8
    assert arrival_rate(0.9, CLUSTER) == pytest.approx(0.9 * 64 / (mean_gpus * expected_duration()))


def test_explicit_mix_mapping() -> None:
    jobs = generate_workload(200, 1.0, CLUSTER, MODEL, seed=0, gpu_mix={4: 1.0})
    assert {j.num_gpus for j in jobs} == {4}


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"num_jobs": -1}, "jobs"), ({"load": 0.0}, "load"), ({"load": float("nan")}, "load"),
    ({"gpu_mix": "alibaba"}, "gpu-mix"), ({"gpu_mix": {1: 0.5}}, "gpu-mix"),
    ({"duration": "pai"}, "duration"),
])
def test_bad_parameters(kwargs: dict[str, object], field: str) -> None:
    args: dict[str, object] = {"num_jobs": 10, "load": 1.0, "cluster": CLUSTER, "model": MODEL, "seed": 0}
    args.update(kwargs)
    with pytest.raises(InputError) as e:
        generate_workload(**args)  # type: ignore[arg-type]
    assert e.value.field == field


def test_custom_mix_from_the_command_line() -> None:
    assert parse_gpu_mix("1:0.7, 2:0.3") == {1: 0.7, 2: 0.3}
    assert parse_gpu_mix("blox") == GPU_MIXES["blox"]
    jobs = generate_workload(20_000, 1.0, CLUSTER, MODEL, seed=5, gpu_mix="1:0.7,2:0.3")
    share = {g: v["share"] for g, v in trace_info(jobs)["gpu_mix"].items()}
    assert share.keys() == {1, 2} and share[1] == pytest.approx(0.7, abs=0.02)


@pytest.mark.parametrize(("text", "needle"), [
    ("1:0.7,2:x", "entry '2:x': 'x' is not a probability"),
    ("1:0.7,two:0.3", "entry 'two:0.3': 'two' is not a GPU count"),
    ("0:1", "entry '0:1': '0' is not a GPU count"),
    ("1:0.7,2", "entry '2': '' is not a probability"),
    ("1:-0.1,2:1.1", "entry '1:-0.1'"),
    ("1:0.5,1:0.5", "entry '1:0.5': GPU count 1 appears twice"),
    ("1:0.5,2:0.4", "sum to 0.9, not 1"),
    ("philly", "unknown GPU mix 'philly'; expected gavel, blox, or GPU-count:probability pairs"),
])
def test_bad_custom_mix_names_the_entry(text: str, needle: str) -> None:
    with pytest.raises(InputError, match="gpu-mix") as e:
        parse_gpu_mix(text)
    assert needle in str(e.value)
