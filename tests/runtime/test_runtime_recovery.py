"""The controller killed with SIGKILL, mid-round and at random, then restarted on the same store:
every job finishes exactly once, no two runs of a job overlap, and no progress is lost."""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Callable
from pathlib import Path

from support.server import Server, runs_of, toy, toy_value, wait_for
from tesserae.runtime.launch import procs
from tesserae.runtime.store.database import DB_NAME, Store


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
    """Deterministic: every job is held at its start by a gate file until the test opens it, so which runs
    exist at each kill does not depend on how fast the machine is (it used to: 'adopted job' was missing
    whenever a job finished before the restart)."""
    state = tmp_path / "state"
    completions = tmp_path / "completions.txt"
    gate = tmp_path / "gate"

    def job(n: int) -> list[str]:
        return toy(n, 0.02, "--completions", str(completions), "--wait-for", str(gate))

    # The jobs are queued on a server that decides once an hour, so none starts yet.
    s0 = servers(state, "--rounds-only", gpus=2, policy="las", round_seconds=3600)
    sizes = {1: 20, 2: 20, 3: 30, 4: 30}
    ids = [s0.submit(job(n), iterations=n) for n in sizes.values()]
    assert ids == list(sizes)
    s0.stop()
    # 1st controller: LAS starts jobs 1 and 2 (held at the gate); SIGKILLed right after the 2nd spawn,
    # before its pid is recorded.
    s1 = servers(state, gpus=2, policy="las", env={"TESSERAE_FAULT": "spawn:2"}, wait=False)
    assert s1.proc.wait(30) == -signal.SIGKILL
    # 2nd controller: adopts both runs (one by its recorded pid, one by its marker); its first decision
    # preempts them for jobs 3 and 4 (no service yet); SIGKILLed right after the 1st SIGTERM.
    s2 = servers(state, gpus=2, policy="las", env={"TESSERAE_FAULT": "stop:1"}, wait=False)
    assert s2.proc.wait(30) == -signal.SIGKILL
    assert s2.log().count("adopted job") == 2, s2.log()
    s3 = servers(state, gpus=2, policy="las")
    gate.touch()
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
    assert _events(state, "adopted") >= 2
    assert procs.pids_with_marker_prefix(str(state)) == []


def test_a_stop_signal_racing_with_a_completed_jobs_exit_does_not_run_it_twice(
        tmp_path: Path, servers: Callable[..., Server]) -> None:
    """The race behind the double completion: a job completed its work (and its side effects), then LAS
    preempted it while its interpreter was shutting down, when Python has put back the default action of
    SIGTERM; it died of the signal, was counted as preempted and ran again: a second completion. Now
    ``Job.complete()`` ignores the stop signal from then on. ``--linger`` holds the job in that window."""
    completions = tmp_path / "completions.txt"
    s = servers(tmp_path / "state", gpus=1, policy="las", round_seconds=3600)
    first = s.submit(toy(5, 0.01, "--completions", str(completions), "--linger", "4"), iterations=5)
    wait_for(lambda: "toy: done" in s.client().get(f"/v1/jobs/{first}/logs").text, 30, 0.05, "the job to be done")
    second = s.submit(toy(3, 0.01, "--completions", str(completions)), iterations=3)  # LAS preempts the first
    wait_for(lambda: _all_done(s, [first, second]), 60, 0.1, "both jobs to complete")
    assert _completions(completions) == {str(first): 1, str(second): 1}
    j = s.job(first)
    kinds = [e["kind"] for e in j["events"]]
    assert "preempting" in kinds and kinds.count("started") + kinds.count("resumed") == 1, kinds
    assert j["exit_code"] == 0


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
