"""Each trace reader on small generated fixtures: semantics of DESIGN §2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tesserae.core.errors import InputError
from tesserae.profiles.default_model import DefaultModel
from tesserae.traces import FORMATS, read_trace
from tesserae.traces.gavel import read_gavel
from tesserae.traces.philly import read_philly
from tesserae.traces.tiresias import read_tiresias

MODEL = DefaultModel()


class DoubleRateModel(DefaultModel):
    """Reference rate 2 iterations/s per GPU: work must be duration x 2 x GPUs."""

    def reference_rate(self, job_type: str, num_gpus: int) -> float:
        return 2.0 * num_gpus


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


TIRESIAS = """job_id,num_gpu,submit_time,iterations,model_name,duration,interval
0,1,100,606,vgg19,164,30
1,8,130,133,vgg11,147,23
2,2,100,157,inception4,127,26
"""


def test_tiresias_basic(tmp_path: Path) -> None:
    jobs = read_tiresias(write(tmp_path / "t.csv", TIRESIAS), MODEL)
    assert [j.job_id for j in jobs] == [0, 2, 1]  # sorted by (submit, id)
    assert [j.submit_time for j in jobs] == [0.0, 0.0, 30.0]  # from the first submission
    j = jobs[2]
    assert (j.num_gpus, j.job_type, j.duration, j.work, j.name) == (8, "vgg11", 147.0, 147.0, "1")


def test_tiresias_work_uses_reference_rate(tmp_path: Path) -> None:
    jobs = read_tiresias(write(tmp_path / "t.csv", TIRESIAS), DoubleRateModel())
    assert {j.job_id: j.work for j in jobs} == {0: 328.0, 1: 147.0 * 16, 2: 127.0 * 4}


def test_tiresias_non_integer_ids_use_row_index(tmp_path: Path) -> None:
    text = "job_id,num_gpu,submit_time,model_name,duration\njobA,1,5,vgg19,10\njobB,2,0,vgg16,20\n"
    jobs = read_tiresias(write(tmp_path / "t.csv", text), MODEL)
    assert [(j.job_id, j.name, j.submit_time) for j in jobs] == [(1, "jobB", 0.0), (0, "jobA", 5.0)]


def test_tiresias_crlf_and_trailing_blank_line(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(TIRESIAS.replace("\n", "\r\n").encode() + b"\r\n")
    assert len(read_tiresias(path, MODEL)) == 3


PHILLY = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:01:55,66.0,1,66.0,11cb48
2017-10-09 06:13:03,2951.0,4,11804.0,6214e9
2017-10-10 06:13:03,10.0,2,20.0,6214e9
"""


def test_philly_times_from_earliest_submission(tmp_path: Path) -> None:
    jobs = read_philly(write(tmp_path / "p.csv", PHILLY), MODEL)
    assert [j.job_id for j in jobs] == [1, 0, 2]  # rows are not sorted in the file
    assert [j.submit_time for j in jobs] == [0.0, 48 * 60 + 52, 86400.0]
    assert [j.num_gpus for j in jobs] == [4, 1, 2]
    assert [j.user for j in jobs] == ["6214e9", "11cb48", "6214e9"]
    assert all(j.work == j.duration for j in jobs)


def test_philly_types_are_seeded(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    write(path, "timestamp,duration,num_gpus\n" + "".join(
        f"2020-01-01 00:00:{k:02d},10,1\n" for k in range(50)))
    a = [j.job_type for j in read_philly(path, MODEL, seed=3)]
    b = [j.job_type for j in read_philly(path, MODEL, seed=3)]
    c = [j.job_type for j in read_philly(path, MODEL, seed=4)]
    assert a == b
    assert a != c
    assert set(a) <= set(MODEL.job_types())
    assert len(set(a)) > 3


GAVEL_7 = (
    "ResNet-18 (batch size 32)\tcd x && python3 main.py\t--num_steps\t1\t1000\t50.000000\t4\n"
    "CycleGAN\tcd y && python3 cyclegan.py\t--n_steps\t1\t500\t20.000000\t1\n"
)
GAVEL_10 = (
    "LM (batch size 5)\tpython main.py\t/wd\t--steps\t1\t2000\t2\t3.5\t-1\t7.0\n"
    "A3C\tpython main.py\t/wd\t--max_steps\t0\t300\t1\t1\t-1\t0\n"
)


def test_gavel_seven_field_layout(tmp_path: Path) -> None:
    jobs = read_gavel(write(tmp_path / "g.trace", GAVEL_7))
    assert [(j.job_id, j.job_type, j.num_gpus, j.work, j.submit_time, j.duration) for j in jobs] == [
        (1, "CycleGAN", 1, 500.0, 0.0, None),
        (0, "ResNet-18 (batch size 32)", 4, 1000.0, 30.0, None),
    ]


def test_gavel_ten_field_layout(tmp_path: Path) -> None:
    jobs = read_gavel(write(tmp_path / "g.trace", GAVEL_10))
    assert [(j.job_id, j.num_gpus, j.work, j.submit_time, j.priority_weight) for j in jobs] == [
        (1, 1, 300.0, 0.0, 1.0),
        (0, 2, 2000.0, 7.0, 3.5),
    ]


CANONICAL = """job_id,submit_time,num_gpus,job_type,work,duration,user,priority_weight,name
7,10.5,2,resnet50,1000,,alice,2,first
3,20,1,vgg19,50,50,,,
"""


def test_canonical_csv_optional_cells(tmp_path: Path) -> None:
    jobs = read_trace(write(tmp_path / "c.csv", CANONICAL), "canonical", MODEL)
    assert jobs[0].job_id == 7 and jobs[0].duration is None and jobs[0].user == "alice"
    assert jobs[0].priority_weight == 2.0 and jobs[0].name == "first" and jobs[0].submit_time == 0.0
    assert jobs[1].priority_weight == 1.0 and jobs[1].name == "" and jobs[1].submit_time == 9.5


def test_canonical_csv_without_optional_columns(tmp_path: Path) -> None:
    text = "job_id,submit_time,num_gpus,job_type,work\n0,0,1,vgg19,5\n"
    (job,) = read_trace(write(tmp_path / "c.csv", text), "canonical", MODEL)
    assert (job.duration, job.user, job.priority_weight, job.name) == (None, "", 1.0, "")


@pytest.mark.parametrize("fmt", FORMATS)
def test_dispatcher_missing_file(tmp_path: Path, fmt: str) -> None:
    with pytest.raises(InputError, match="not found") as e:
        read_trace(tmp_path / "nope.csv", fmt, MODEL)
    assert "nope.csv" in str(e.value)


def test_dispatcher_unknown_format_lists_valid_ones(tmp_path: Path) -> None:
    path = write(tmp_path / "t.csv", TIRESIAS)
    with pytest.raises(InputError) as e:
        read_trace(path, "alibaba", MODEL)
    for fmt in FORMATS:
        assert fmt in str(e.value)


def test_dispatcher_routes_every_format(tmp_path: Path) -> None:
    assert len(read_trace(write(tmp_path / "t.csv", TIRESIAS), "tiresias", MODEL)) == 3
    assert len(read_trace(write(tmp_path / "p.csv", PHILLY), "Philly", MODEL, seed=1)) == 3
    assert len(read_trace(write(tmp_path / "g.trace", GAVEL_10), "gavel", MODEL)) == 2
    assert len(read_trace(write(tmp_path / "c.csv", CANONICAL), "canonical", MODEL)) == 2
