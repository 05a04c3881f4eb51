"""``benchmarks/round_latency.py --learned``: the oracle's and the learned decisions alternate one by one in one
process, and the row reports the pairs' ratios (at a tiny size: the large ones are the benchmark's)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import numpy as np

import _paired_latency as pl


def _sequence(learned_first: bool) -> tuple[str, dict]:
    """The order the two runs' measured decisions ran in (O: oracle, L: learned), and the repeat's record."""
    records: list[list[dict]] = []
    side = pl._side

    def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        sim, rec = side(*args, **kwargs)
        records.append(rec)
        return sim, rec

    pl._side = recording
    try:
        out = pl.paired("tiresias-las:tesserae+packing", 64, 80, 4, 0, 120.0, learned_first, 2)
    finally:
        pl._side = side
    oracle, learned = records
    seq = sorted([(r["at"], "O") for r in oracle] + [(r["at"], "L") for r in learned])
    return "".join(s for _, s in seq), out


def test_the_two_runs_alternate_decision_by_decision() -> None:
    seq, out = _sequence(False)
    assert seq == "OL" * (len(seq) // 2) and len(seq) >= 12
    assert len(out["pairs"]) == 4  # after the 2 warm-up rounds
    p = out["pairs"][0]
    assert p["oracle"] > 0 and p["learned"] > 0 and 0 < p["view"] < p["learned"] and p["refit"] > 0
    seq, _ = _sequence(True)
    assert seq == "LO" * (len(seq) // 2)


def test_the_row_gives_the_median_of_the_pairs_ratios_and_their_spread() -> None:
    def repeat(ratios: list[float]) -> dict:
        return {"label": "x", "gpus": 16384, "jobs": 1, "learned_first": False, "classes_median": 7.0,
                "pairs": [{"oracle": 0.1, "learned": 0.1 * q, "view": 0.01, "refit": 0.02, "oracle_active": 10,
                           "learned_active": 11} for q in ratios]}

    row = pl.summarize([repeat([1.0, 2.0, 3.0]), repeat([1.5, 1.5, 4.0])])
    assert row["repeats"] == 2 and row["pairs"] == 6
    assert abs(row["ratio"]["median"] - 1.75) < 1e-9
    assert abs(row["ratio"]["min"] - 1.0) < 1e-9 and abs(row["ratio"]["max"] - 4.0) < 1e-9
    assert abs(row["ratio_with_refit"]["median"] - 1.95) < 1e-9  # the refit counted: + 0.02 / 0.1
    assert np.allclose(row["ratio_per_repeat"], [2.0, 1.5])
    lines = pl.report_lines([{**row, "method": "interleaved", "date": time.strftime("%Y"), "load": "1"}], "m", 3)
    assert "1.75x" in lines[-1] and "1.95x" in lines[-1] and "6 (2)" in lines[-1]
