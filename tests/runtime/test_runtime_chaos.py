"""Chaos in CI (issue 13, point 7): the controller SIGKILLed at random steps of its write-ahead protocol
and at random moments, restarted each time; every job completes exactly once, no two runs of a job at
once, no GPU given twice, no process left behind. The long version is ``benchmarks/chaos.py``."""

from __future__ import annotations

from pathlib import Path

from support.chaos import run_chaos


def test_random_controller_kills_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    result = run_chaos(tmp_path, jobs=5, kills=4, seed=7, gpus=2, fault_p=0.05, timeout=300)
    assert result.kills == 4
    assert result.ok, (result.summary(), result)
    assert result.completed == 5
