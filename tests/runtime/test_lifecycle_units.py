"""Units of the lifecycle controls and of the pending reasons: parsing, backoff, blocking, retries,
the queue's reasons and positions, and the log's tail."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tesserae.runtime.controller import lifecycle, pending
from tesserae.runtime.job.files import tail_offset


def row(**kw: Any) -> dict[str, Any]:
    base = {"id": 5, "state": "queued", "held": 0, "after": "[]", "retry_at": None, "retries": 0,
            "retries_used": 0, "retry_backoff": 10.0, "cancel_requested": 0, "num_gpus": 1, "time_limit": None}
    return {**base, **kw}


@pytest.mark.parametrize(("text", "want"), [
    ("0-3", [0, 1, 2, 3]), ("0-9:4", [0, 4, 8]), ("1,3,5", [1, 3, 5]), ("0-2,7", [0, 1, 2, 7]), ("4", [4]),
    ("2,2,1", [1, 2]),
])
def test_array_ranges(text: str, want: list[int]) -> None:
    assert lifecycle.parse_array(text) == want


@pytest.mark.parametrize(("text", "needle"), [
    ("3-1", "ends before it begins"), ("0-9:0", "step must be at least 1"), ("a-b", "not an index or a range"),
    ("0-10000", "at most 10000 tasks"), ("", "not an index"), ("0-2000000", "indexes go up to"),
])
def test_bad_array_ranges(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        lifecycle.parse_array(text)


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400), ("1h30m", 5400), ("1:30", 90),
    ("01:00:00", 3600), ("0.5", 0.5), (" 2H ", 7200),
])
def test_durations(text: str, seconds: float) -> None:
    assert lifecycle.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "soon", "1:2:3:4", "-5", "5x", "::", "0s"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        lifecycle.parse_duration(text)


def test_backoff_doubles_up_to_an_hour() -> None:
    assert [lifecycle.backoff(10, k) for k in (1, 2, 3)] == [10, 20, 40]
    assert lifecycle.backoff(10, 40) == lifecycle.MAX_BACKOFF


def test_blocked_reasons_in_order() -> None:
    states = {1: "running", 2: "completed"}
    assert lifecycle.blocked(row(held=1, after='[[1, "any"]]'), states, 0).startswith("held")
    assert lifecycle.blocked(row(after='[[2, "ok"], [1, "any"]]'), states, 0) == \
        "dependency on job 1 (running)"
    assert lifecycle.blocked(row(after='[[2, "ok"]]'), states, 0) is None
    assert lifecycle.blocked(row(retry_at=100.0, retries=3, retries_used=1), states, 40) == \
        "retry 1 of 3: backoff, 60 s left"
    assert lifecycle.blocked(row(retry_at=100.0, retries=3, retries_used=1), states, 100) is None


def test_unsatisfiable_only_for_ok_dependencies_that_ended_otherwise() -> None:
    states = {1: "failed", 2: "cancelled", 3: "completed", 4: "running"}
    assert lifecycle.unsatisfiable(row(after='[[1, "any"], [3, "ok"], [4, "ok"]]'), states) is None
    assert "job 2 cancelled" in (lifecycle.unsatisfiable(row(after='[[2, "ok"]]'), states) or "")


def test_retries_requeue_only_failures_while_some_are_left() -> None:
    job = row(retries=2, retries_used=1, retry_backoff=3.0)
    assert lifecycle.retry(job, "failed", "failed", "exited with code 1", 100.0) == (
        "queued", "retry 2 of 2 after 6 s; the run exited with code 1", 106.0)
    assert lifecycle.retry(row(retries=2, retries_used=2), "failed", "failed", "x", 0)[2] is None
    assert lifecycle.retry(job, "failed", "timed-out", "x", 0)[2] is None
    assert lifecycle.retry({**job, "cancel_requested": 1}, "failed", "failed", "x", 0)[2] is None
    assert lifecycle.retry(job, "completed", "completed", "", 0) == ("completed", "", None)


def test_pending_reasons_and_positions() -> None:
    queue = pending.Queue(now=10.0, states={1: "running", 2: "queued", 3: "queued", 4: "queued", 5: "queued"},
                          total_gpus=4, free_gpus=2, order=[4, 3], levels={3: 0, 4: 1})
    rows = [row(id=2, held=1), row(id=3, num_gpus=1), row(id=4, num_gpus=4), row(id=5, num_gpus=1),
            row(id=6, after=json.dumps([[1, "ok"]]))]
    got = pending.reasons(queue, rows)
    assert got[2] == pending.Pending(None, "held (tesserae release 2)")
    assert got[4] == pending.Pending(1, "waiting for 4 GPUs (2 free)")
    assert got[3] == pending.Pending(2, "behind 1 job in queue 0")
    assert got[5] == pending.Pending(3, "behind 2 jobs")  # arrived after the decision: last, in id order
    assert got[6].position is None and got[6].reason.startswith("dependency on job 1")


def test_a_new_rule_goes_before_the_resources(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pending, "RULES", [*pending.RULES, lambda r, q: "over quota" if r["id"] == 3 else None])
    queue = pending.Queue(now=0.0, states={}, total_gpus=2, free_gpus=2)
    got = pending.reasons(queue, [row(id=3), row(id=4)])
    assert got[3] == pending.Pending(None, "over quota") and got[4] == pending.Pending(1, "next to start (at the "
                                                                                         "next decision)")


def test_tenant_queue_reason_after_lifecycle_before_resources() -> None:
    """One pending reason per job: a held job says held even when its queue is over quota; a job its
    queue holds back says so (no position), though GPUs are free; the others wait for the GPUs."""
    queue = pending.Queue(now=0.0, states={}, total_gpus=2, free_gpus=1,
                          tenant_reasons={2: "queue at its borrowing limit", 3: "queue at its borrowing limit"})
    got = pending.reasons(queue, [row(id=2, held=1), row(id=3), row(id=4, num_gpus=2)])
    assert got[2].reason.startswith("held")
    assert got[3] == pending.Pending(None, "queue at its borrowing limit")
    assert got[4] == pending.Pending(1, "waiting for 2 GPUs (1 free)")


@given(st.lists(st.binary(max_size=30).filter(lambda b: b"\n" not in b), max_size=12), st.booleans(),
       st.integers(1, 15), st.integers(1, 400))
@example(lines=[b"\r\x00"], newline_at_end=False, n=1, window=2)  # a carriage return is not a line end
def test_tail_is_the_last_lines(tmp_path_factory: pytest.TempPathFactory, lines: list[bytes], newline_at_end: bool,
                                n: int, window: int) -> None:
    path = Path(tmp_path_factory.mktemp("tail")) / "output.log"
    data = b"\n".join(lines) + (b"\n" if newline_at_end and lines else b"")
    path.write_bytes(data)
    got = data[tail_offset(path, n, window):]
    if len(data) <= window:
        want = b"".join(io.BytesIO(data).readlines()[-n:])  # lines end at b"\n" only (not at a b"\r")
        assert got == want
    else:  # the tail lies in the last `window` bytes and starts at a line (or at the window: one long line)
        assert len(got) <= window and data.endswith(got)
        assert got == data[-window:] or data[len(data) - len(got) - 1:len(data) - len(got)] == b"\n"


def test_tail_of_a_missing_log_is_empty(tmp_path: Path) -> None:
    assert tail_offset(tmp_path / "none.log", 5, 100) == 0
