"""The controller killed with SIGKILL, mid-round and at random, then restarted on the same store:
every job finishes exactly once, no two runs of a job overlap, and no progress is lost."""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Callable
from pathlib import Path

from rt_helpers import Server, runs_of, toy, toy_value, wait_for

from tesserae.runtime import procs
from tesserae.runtime.store import DB_NAME, Store


def _completions(path: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            job = line.split()[0]
            counts[job] = counts.get(job, 0) + 1
    return counts


def _events(state: Path, kind: str) -> int:
    store = Store(state / DB_NAME, create=False)
    try:
        return len(store.query("SELECT id FROM events WHERE kind=?", (kind,)))
    finally:
        store.close()


def _all_done(s: Server, ids: list[int]) -> bool:
    return all(s.job(i)["state"] == "completed" for i in ids)


def test_sigkill_mid_round_then_restart_finishes_every_job_exactly_once(
        tmp_path: Path, servers: Callable[..., Server]) -> None:
    state = tmp_path / "state"
    completions = tmp_path / "completions.txt"
    # The jobs are queued on a server that decides once an hour, so none starts yet.
    s0 = servers(state, "--rounds-only", gpus=2, policy="las", round_seconds=3600)
    # LAS starts jobs 1 and 2, then preempts them for 3 and 4: the 3rd spawn is job 3 or 4. Those two
    # are long enough (4 s) to outlive the restart, so the 2nd controller has a run to adopt.
    sizes = {1: 40, 2: 40, 3: 100, 4: 100}
    ids = [s0.submit(toy(n, 0.04, "--completions", str(completions)), iterations=n) for n in sizes.values()]
    assert ids == list(sizes)
    s0.stop()
    assert all(s0.state.joinpath("jobs", str(i), "runs").exists() is False for i in ids)
    # 1st controller: SIGKILLed right after spawning its 3rd process, before recording the pid.
    s1 = servers(state, gpus=2, policy="las", env={"TESSERAE_FAULT": "spawn:3"}, wait=False)
    assert s1.proc.wait(30) == -signal.SIGKILL
    # 2nd controller: SIGKILLed right after its 1st preemption signal, before the job has stopped.
    s2 = servers(state, gpus=2, policy="las", env={"TESSERAE_FAULT": "stop:1"}, wait=False)
    assert s2.proc.wait(30) == -signal.SIGKILL
    assert "adopted job" in s2.log()
    s3 = servers(state, gpus=2, policy="las")
    wait_for(lambda: _all_done(s3, ids), 60, 0.2, "every job to complete")

    counts = _completions(completions)
    assert counts == {str(i): 1 for i in ids}, counts
    for i in ids:
        job_dir = state / "jobs" / str(i)
        assert not (job_dir / "checkpoints" / "overlap.log").exists(), f"job {i} ran twice at once"
        runs = runs_of(state, i)
        assert runs[0]["start"] == 0 and runs[-1]["end"] == sizes[i]
        for a, b in itertools.pairwise(runs):
            assert b["start"] == a["end"], f"job {i}: progress lost or repeated: {runs}"
    assert _events(state, "adopted") >= 1
    assert procs.pids_with_marker_prefix(str(state)) == []


def test_sigkill_at_random_with_a_lost_job_process(tmp_path: Path, servers: Callable[..., Server]) -> None:
    state = tmp_path / "state"
    completions = tmp_path / "completions.txt"
    # FIFO: jobs 1 and 2 start and keep running (no preemption can race with the kill below).
    s1 = servers(state, gpus=2, policy="fifo")
    ids = [s1.submit(toy(50, 0.04, "--completions", str(completions), "--checkpoint-every", "5"), iterations=50)
           for _ in range(4)]
    victim = ids[0]
    wait_for(lambda: s1.job(victim)["iterations_done"] >= 6, 20, 0.05, "the first job to pass a checkpoint")
    s1.kill()
    # While no controller runs, one job's whole process tree dies (say, the OOM killer): no exit code anywhere.
    pids = procs.pids_with_marker_prefix(str(state / "jobs" / str(victim)) + "/")
    assert pids
    procs.kill_pids(pids, signal.SIGKILL)
    wait_for(lambda: all(procs.start_ticks(p) is None for p in pids), 10, 0.02, "the victim to die")
    s2 = servers(state, gpus=2, policy="las")
    wait_for(lambda: _all_done(s2, ids), 60, 0.2, "every job to complete")

    assert _completions(completions) == {str(i): 1 for i in ids}
    for i in ids:
        assert not (state / "jobs" / str(i) / "checkpoints" / "overlap.log").exists()
        runs = runs_of(state, i)
        assert runs[-1]["end"] == 50
        for a, b in itertools.pairwise(runs):
            # Only the victim may repeat work, and no more than since its last checkpoint (5 iterations).
            assert a["end"] - (5 if i == victim else 0) <= b["start"] <= a["end"], (i, runs)
    job = s2.job(victim)
    assert "lost" in [e["kind"] for e in job["events"]]
    result = (state / "jobs" / str(victim) / "checkpoints" / "result.json").read_text()
    assert f'"value": {toy_value(50)}' in result
    assert os.path.exists(state / "tesserae.db")
