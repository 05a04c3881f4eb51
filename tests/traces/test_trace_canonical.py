"""Canonical format: write then read gives the same jobs back, in CSV and in Parquet."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tesserae.core.errors import InputError
from tesserae.core.jobs import Controls, JobSpec
from tesserae.profiles.default_model import DefaultModel
from tesserae.traces import (
    generate_workload,
    load_cluster,
    read_canonical,
    read_trace,
    write_canonical,
    write_canonical_csv,
    write_canonical_parquet,
)

MODEL = DefaultModel()
finite = st.floats(min_value=0.0, max_value=1e12, allow_nan=False, allow_infinity=False)
positive = st.floats(min_value=1e-6, max_value=1e12, allow_nan=False, allow_infinity=False)
label = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=8)


@st.composite
def job_lists(draw: st.DrawFn) -> list[JobSpec]:
    n = draw(st.integers(1, 8))
    ids = draw(st.lists(st.integers(0, 2**63 - 1), min_size=n, max_size=n, unique=True))
    jobs = [
        JobSpec(job_id=i, submit_time=draw(finite), num_gpus=draw(st.integers(1, 512)),
                job_type=draw(label.filter(lambda s: s.strip() == s and s != "")), work=draw(positive),
                duration=draw(st.none() | positive),
                user=draw(label.filter(lambda s: s.strip() == s)), priority_weight=draw(positive),
                name=draw(label.filter(lambda s: s.strip() == s)),
                gpu_type=draw(st.none() | st.sampled_from(["a100", "v100", "h100"])),
                cpus=draw(st.none() | positive), memory_mb=draw(st.none() | st.integers(1, 2**40)),
                controls=draw(st.none() | st.builds(Controls, time_limit=st.none() | positive,
                                                    cancel_after=st.none() | positive)))
        for i in ids
    ]
    t0 = min(j.submit_time for j in jobs)
    jobs = [JobSpec(**{**_fields(j), "submit_time": j.submit_time - t0}) for j in jobs]
    return sorted(jobs, key=lambda j: (j.submit_time, j.job_id))


def _fields(j: JobSpec) -> dict[str, object]:
    return {f: getattr(j, f) for f in JobSpec.__slots__}


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".pq"])
@given(jobs=job_lists())
@settings(max_examples=40, deadline=None)
def test_round_trip(suffix: str, jobs: list[JobSpec]) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"trace{suffix}"
        write_canonical(jobs, path)
        assert read_canonical(path) == jobs
        # Any job type round-trips; the built-in model takes the unknown ones as generic only when told.
        assert read_trace(path, "canonical", MODEL, unprofiled="generic") == jobs


def test_round_trip_generated_workload(tmp_path: Path) -> None:
    jobs = generate_workload(500, 0.8, load_cluster("8x4"), MODEL, seed=5)
    write_canonical_csv(jobs, tmp_path / "w.csv")
    write_canonical_parquet(jobs, tmp_path / "w.parquet")
    assert read_canonical(tmp_path / "w.csv") == jobs
    assert read_canonical(tmp_path / "w.parquet") == jobs


def test_writer_writes_every_column(tmp_path: Path) -> None:
    path = write_canonical_csv([JobSpec(0, 0.0, 1, "vgg19", 5.0)], tmp_path / "t.csv")
    header, row = path.read_text(encoding="utf-8").splitlines()
    assert header == "job_id,submit_time,num_gpus,job_type,work,duration,user,priority_weight,name,queue,priority_class"
    assert row == "0,0.0,1,vgg19,5.0,,,1.0,,,normal"


def test_queue_and_priority_class_columns(tmp_path: Path) -> None:
    jobs = [JobSpec(0, 0.0, 1, "vgg19", 5.0, queue="vision", priority_class="production"),
            JobSpec(1, 1.0, 2, "vgg19", 5.0)]
    for suffix in (".csv", ".parquet"):
        back = read_canonical(write_canonical(jobs, tmp_path / f"t{suffix}"))
        assert [(j.queue, j.priority_class) for j in back] == [("vision", "production"), ("", "normal")]
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,submit_time,num_gpus,job_type,work,priority_class\n0,0,1,vgg19,5,urgent\n")
    with pytest.raises(InputError, match="line 2, field 'priority_class': unknown priority class 'urgent'"):
        read_canonical(bad)
