"""The Slurm history reader (``traces.slurm``) on hand-written sacct dumps: every case the issue lists,
worked out by hand, and bad input named by file, line and field. (The same reader on sacct's own
output of jobs real daemons ran: ``tests/slurm/test_slurm_import.py``.)"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from tesserae.core.cluster import parse_cluster_spec
from tesserae.core.errors import InputError
from tesserae.core.jobs import Controls
from tesserae.profiles.default_model import DefaultModel
from tesserae.sim.metrics import job_records
from tesserae.sim.runner import RunSpec, simulate
from tesserae.traces import read_trace
from tesserae.traces.slurm import NEVER_STARTED, NO_GPUS, REVOKED, STEPS, UNFINISHED, read_slurm_import

MODEL = DefaultModel()
HEAD = ("JobIDRaw|JobID|State|Submit|Start|End|ElapsedRaw|AllocTRES|ReqTRES|AllocCPUS|NNodes|User|Account|Partition|"
        "JobName")
GPU2 = "billing=4,cpu=4,gres/gpu:a100=2,gres/gpu=2,mem=16G,node=1"
ONE = "cpu=1,gres/gpu=1,node=1"


def row(raw: object, state: str, submit: str, start: str, end: str, elapsed: object, alloc: str = ONE,
        req: str = "gres/gpu=1", *, jobid: str | None = None, nodes: int = 1, user: str = "ann", account: str = "phys",
        partition: str = "gpu", name: str = "job") -> str:
    return "|".join(str(x) for x in (raw, jobid or raw, state, submit, start, end, elapsed, alloc, req, 1, nodes, user,
                                     account, partition, name))


def dump(tmp_path: Path, *rows: str, head: str = HEAD) -> Path:
    p = tmp_path / "sacct.txt"
    p.write_text("\n".join([head, *rows, ""]))
    return p


T = "2024-03-01T10:00:"


def test_every_case_of_a_month(tmp_path: Path) -> None:
    p = dump(
        tmp_path,
        row(100, "COMPLETED", T + "00", T + "05", "2024-03-01T11:00:05", 3600, GPU2, GPU2, name="resnet50"),
        row(101, "COMPLETED", T + "05", T + "05", "2024-03-01T11:00:05", 3600, jobid="100.batch"),
        row(102, "COMPLETED", T + "05", T + "05", "2024-03-01T11:00:05", 3600, jobid="100.extern"),
        row(103, "FAILED", T + "10", T + "20", T + "50", 30, jobid="99_3", name="a|b"),  # a '|' in the name
        row(104, "CANCELLED by 1000", T + "10", "Unknown", T + "30", 0),  # cancelled while waiting
        row(114, "CANCELLED by 0", T + "10", T + "30", T + "30", 0, ""),  # the same, as Slurm 22.05 records it
        row(105, "TIMEOUT", T + "10", T + "10", "2024-03-01T12:00:10", 7200, "cpu=8,gres/gpu=8,node=2",
            "gres/gpu=8", nodes=2),
        row(106, "REQUEUED", T + "10", T + "10", T + "40", 30),  # three attempts: requeued, node failure, done
        row(106, "NODE_FAIL", T + "41", T + "42", T + "52", 10),
        row(106, "COMPLETED", T + "53", T + "54", "2024-03-01T10:01:54", 60),
        row(107, "RUNNING", T + "10", T + "10", "Unknown", 99),  # no end yet
        row(108, "CANCELLED by 0", T + "10", T + "10", T + "40", 30),
        row(109, "COMPLETED", T + "10", T + "10", T + "40", 30, "cpu=1,node=1", "cpu=1"),  # no GPUs
        row(110, "PENDING", T + "10", "Unknown", "Unknown", 0),
        row(111, "REVOKED", T + "10", "None", "None", 0),
        row(112, "OUT_OF_MEMORY", T + "10", T + "10", T + "11", 0, "gres/gpu:a100_0=1,gres/gpu:a100_2=1,gres/gpu=2",
            "gres/gpu:a100_0=1,gres/gpu:a100_2=1"),  # per-GPU types (docs/slurm.md) count as their model
        row(113, "PREEMPTED", T + "10", T + "10", T + "25", 15),  # preempted and requeued, then failed twice
        row(113, "FAILED", T + "30", T + "30", T + "40", 10),
        row(113, "FAILED", T + "45", T + "45", T + "57", 12),
    )
    got = read_slurm_import(p, MODEL, queue_by="partition.account", keep_requested_types=True)
    assert {j.gpu_type for j in read_slurm_import(p, MODEL).jobs} == {None}  # asked-for types: no constraint
    jobs = {j.job_id: j for j in got.jobs}
    assert sorted(jobs) == [100, 103, 105, 106, 108, 112, 113]
    assert got.records == 19 and got.left_out == {STEPS: 2, NEVER_STARTED: 2, UNFINISHED: 2, NO_GPUS: 1, REVOKED: 1}
    j = jobs[100]
    assert (j.submit_time, j.num_gpus, j.job_type, j.duration, j.name) == (0.0, 2, "resnet50", 3600.0, "100")
    assert j.work == 3600 * MODEL.rate("resnet50", 2, "a100")  # ran on a100s: replayed there, it lasts as long
    assert (j.user, j.queue, j.cpus, j.memory_mb, j.gpu_type, j.controls) == ("ann", "gpu.phys", 4.0, 16384, "a100",
                                                                              None)
    assert jobs[103].name == "99_3" and jobs[103].submit_time == 10.0
    assert jobs[103].controls == Controls(retries=0, retry_backoff=0.0, failures=1, fail_after=30.0)
    fastest = max(MODEL.rate(jobs[105].job_type, 8, t) for t in MODEL.gpu_types())
    assert jobs[105].controls == Controls(time_limit=7200.0, retry_backoff=0.0)
    assert jobs[105].work == 2 * 7200 * fastest  # did not complete: its end is its record's
    # Attempts: 30 s (requeued: work), 10 s (node failure: a failure), 60 s (completed).
    assert (jobs[106].duration, jobs[106].submit_time) == (100.0, 10.0)
    assert jobs[106].controls == Controls(retries=1, retry_backoff=0.0, failures=1, fail_after=10.0)
    assert jobs[108].controls == Controls(retry_backoff=0.0, cancel_after=30.0)
    assert jobs[112].num_gpus == 2 and jobs[112].gpu_type == "a100" and jobs[112].duration == 1.0
    assert jobs[113].duration == 37.0
    assert jobs[113].controls == Controls(retries=1, retry_backoff=0.0, failures=2, fail_after=11.0)


def test_the_replay_ends_each_job_as_its_record_did(tmp_path: Path) -> None:
    p = dump(
        tmp_path,
        row(1, "COMPLETED", T + "00", T + "00", T + "10", 100),
        row(2, "FAILED", T + "00", T + "00", T + "10", 50),
        row(3, "TIMEOUT", T + "00", T + "00", T + "10", 60),
        row(4, "CANCELLED by 7", T + "00", T + "00", T + "10", 70),
    )
    jobs = read_slurm_import(p, MODEL).jobs
    # On GPUs 3x the reference (h100) and with no restart cost the completed job is 3x faster, and the
    # others still end as recorded, after the run time they had.
    run = RunSpec(policy="fifo", restart_overhead=0, event_driven=True)
    result, _ = simulate(jobs, parse_cluster_spec("1x4:h100"), MODEL, run)
    rec = {r["job_id"]: r for r in job_records(result)}
    assert [rec[i]["outcome"] for i in (1, 2, 3, 4)] == ["completed", "failed", "timed_out", "cancelled"]
    assert [rec[i]["finish_time"] for i in (1, 2, 3, 4)] == pytest.approx([100 / 3, 50, 60, 70])


def test_time_zones_are_explicit(tmp_path: Path) -> None:
    # Berlin leaves winter time at 2:00 on 2024-03-31: an hour of wall clock that never happened.
    p = dump(tmp_path, row(1, "COMPLETED", "2024-03-31T01:30:00", "2024-03-31T01:30:00", "2024-03-31T03:30:00", 3600),
             row(2, "COMPLETED", "2024-03-31T03:30:00", "2024-03-31T03:30:00", "2024-03-31T04:30:00", 3600),
             row(3, "COMPLETED", "1711852200", "1711852200", "1711855800", 3600),  # epoch: 2024-03-31T02:30Z
             row(4, "COMPLETED", "2024-03-31T05:30:00+02:00", T + "00", T + "00", 10))  # an offset wins
    berlin = {j.job_id: j.submit_time for j in read_slurm_import(p, MODEL, zone="Europe/Berlin").jobs}
    utc = {j.job_id: j.submit_time for j in read_slurm_import(p, MODEL).jobs}
    assert berlin[2] == 3600.0 and utc[2] == 7200.0  # 01:30 CET and 03:30 CEST are an hour apart
    first = datetime(2024, 3, 31, 1, 30, tzinfo=ZoneInfo("Europe/Berlin")).timestamp()
    assert berlin[3] == 1711852200 - first
    assert utc[3] == 1711852200 - datetime(2024, 3, 31, 1, 30, tzinfo=UTC).timestamp()
    assert berlin[4] == utc[4] + 3600 == 10800.0  # 03:30Z, given with its offset: Berlin starts an hour earlier
    with pytest.raises(InputError, match="unknown time zone") as e:
        read_slurm_import(p, MODEL, zone="Mars/Olympus")
    assert e.value.field == "timezone"


@pytest.mark.parametrize(("by", "queues"), [("account", {"phys", "chem"}), ("partition", {"gpu"}),
                                            ("user", {""}), ("none", {""})])
def test_queue_by(tmp_path: Path, by: str, queues: set[str]) -> None:
    p = dump(tmp_path, row(1, "COMPLETED", T + "00", T + "00", T + "10", 10),
             row(2, "COMPLETED", T + "00", T + "00", T + "10", 10, account="chem"))
    assert {j.queue for j in read_slurm_import(p, MODEL, queue_by=by).jobs} == queues


def test_job_types_from_names_else_drawn_with_the_seed(tmp_path: Path) -> None:
    p = dump(tmp_path, *(row(i, "COMPLETED", T + "00", T + "00", T + "10", 10, name="vgg16" if i == 0 else "x")
                         for i in range(20)))
    a, b = read_slurm_import(p, MODEL, seed=1).jobs, read_slurm_import(p, MODEL, seed=1).jobs
    assert a == b and a[0].job_type == "vgg16"
    assert [j.job_type for j in a] != [j.job_type for j in read_slurm_import(p, MODEL, seed=2).jobs]
    assert read_trace(p, "slurm", MODEL, seed=1) == a  # --format slurm: the same reader, the defaults


def test_untyped_gpus_take_the_gpu_type_given(tmp_path: Path) -> None:
    p = dump(tmp_path, row(1, "COMPLETED", T + "00", T + "00", T + "10", 100))
    (ref,) = read_slurm_import(p, MODEL).jobs
    (h100,) = read_slurm_import(p, MODEL, gpu_type="h100").jobs
    assert h100.work == 3 * ref.work and h100.gpu_type is None  # ran on h100s; it did not ask for them


BAD = [
    ("", HEAD.replace("State|", ""), 1, "State", "missing field"),
    ("", HEAD.replace("AllocTRES|ReqTRES|", ""), 1, "AllocTRES", "missing field"),
    ("", HEAD.replace("JobIDRaw|JobID|", ""), 1, "JobID", "missing field"),
    ("", HEAD.replace("|", " "), 1, None, "--parsable2"),
    (row(1, "COMPLETED", "yesterday", T + "00", T + "10", 10), HEAD, 2, "Submit", "bad time"),
    (row(1, "COMPLETED", T + "00", T + "00", T + "10", "ten"), HEAD, 2, "ElapsedRaw", "bad duration"),
    (row(1, "COMPLETED", T + "00", T + "00", T + "10", 10, "gres/gpu=two"), HEAD, 2, "AllocTRES", "bad TRES count"),
    (row(1, "COMPLETED", T + "00", T + "00", T + "10", 10, "gres/gpu"), HEAD, 2, "AllocTRES", "bad TRES entry"),
    (row(1, "EXPLODED", T + "00", T + "00", T + "10", 10), HEAD, 2, "State", "unknown job state"),
    ("\n".join([row(1, "COMPLETED", T + "00", T + "00", T + "10", 10)] * 2), HEAD, 3, "JobIDRaw", "appears twice"),
    (row("1_4", "COMPLETED", T + "00", T + "00", T + "10", 10).split("|", 1)[1], HEAD.split("|", 1)[1], 2, "JobIDRaw",
     "array task"),
    (row("1+0", "COMPLETED", T + "00", T + "00", T + "10", 10).split("|", 1)[1], HEAD.split("|", 1)[1], 2, "JobIDRaw",
     "heterogeneous"),
    (row(1, "COMPLETED", T + "00", T + "00", T + "10", 10) + "|extra", HEAD.replace("|JobName", ""), 2, None,
     "fields where the header has"),
    (row(1, "COMPLETED", T + "00", T + "00", T + "10", 10, "cpu=1", "cpu=1"), HEAD, None, "AllocTRES", "no job"),
    (row(1, "COMPLETED", T + "00", "2024-03-01T11:00:00", T + "10", ""), HEAD, 2, "End", "ends before"),
    ("", "", 1, "JobID", "no jobs"),
]


@pytest.mark.parametrize(("body", "head", "line", "field", "needle"), BAD)
def test_bad_dumps_name_file_line_and_field(tmp_path: Path, body: str, head: str, line: int | None,
                                            field: str | None, needle: str) -> None:
    p = tmp_path / "sacct.txt"
    p.write_text(head + ("\n" + body if body else "") + "\n" if head else "")
    with pytest.raises(InputError) as e:
        read_slurm_import(p, MODEL)
    assert needle in str(e.value) and e.value.line == line and e.value.field == field, str(e.value)
    assert str(p) in str(e.value)


def test_not_utf8_names_its_line(tmp_path: Path) -> None:
    p = tmp_path / "sacct.txt"
    p.write_bytes((HEAD + "\n" + row(1, "COMPLETED", T + "00", T + "00", T + "10", 10)).encode() + b"\xff\n")
    with pytest.raises(InputError, match="not UTF-8") as e:
        read_slurm_import(p, MODEL)
    assert e.value.line == 2


CLI = [sys.executable, "-m", "tesserae.cli", "trace", "import", "slurm"]


def test_cli_import_then_info(tmp_path: Path) -> None:
    p = dump(tmp_path, row(1, "COMPLETED", T + "00", T + "00", T + "10", 10),
             row(2, "CANCELLED by 0", T + "00", "None", T + "10", 0), row(1, "COMPLETED", T + "00", T + "00",
                                                                            T + "10", 10, jobid="1.batch"))
    out = tmp_path / "t.parquet"
    r = subprocess.run([*CLI, str(p), "--out", str(out), "--timezone", "Europe/Berlin"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert "imported 1 jobs" in r.stdout and "times read in Europe/Berlin" in r.stdout
    assert "left out: 1 never started" in r.stdout and "left out: 1 steps" in r.stdout
    info = subprocess.run([sys.executable, "-m", "tesserae.cli", "trace", "info", str(out), "--json"],
                          capture_output=True, text=True)
    assert info.returncode == 0 and '"jobs": 1' in info.stdout


@pytest.mark.parametrize(("args", "needle"), [
    ([], "give a sacct dump (FILE) or --sacct"),
    (["FILE", "--sacct"], "give a sacct dump (FILE) or --sacct"),
    (["FILE", "--partition", "gpu"], "--partition and --clusters go with --sacct"),
    (["FILE", "--queue", "team"], "'team' is not one of"),
    (["--sacct"], "sacct is not installed here"),
])
def test_cli_mistakes_are_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    p = dump(tmp_path, row(1, "COMPLETED", T + "00", T + "00", T + "10", 10))
    r = subprocess.run([*CLI, *[str(p) if a == "FILE" else a for a in args], "--out", str(tmp_path / "o.csv")],
                       capture_output=True, text=True, env={"PATH": str(Path(sys.executable).parent)})
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and needle in lines[0], r.stderr
