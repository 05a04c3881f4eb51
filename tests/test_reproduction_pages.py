"""The fidelity pages show what their results files hold (issue 29): each page's generated part is
exactly what its script renders from the committed results, so a figure edited by hand, or results
recorded without the page being rewritten, fail here. Regenerating the results themselves is
``make reproduce-check`` (long; not part of the tests)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import gavel_fidelity  # noqa: E402 (the benchmarks folder is put on the path first)
import tiresias_fidelity  # noqa: E402


def test_gavel_page_table_is_rendered_from_its_results() -> None:
    rows = json.loads((REPO / "docs" / "reproduction" / "gavel_results.json").read_text())
    assert gavel_fidelity.rendered(rows) in gavel_fidelity.PAGE.read_text()
    # Every packed case below the target lists its worst jobs.
    low = [r for r in rows if r["policy"] == "max_min_fairness_packed" and r["within_10pct"] < 0.85]
    for r in low:
        assert f"The jobs of {gavel_fidelity._label(r)} packed furthest" in gavel_fidelity.PAGE.read_text()


def test_tiresias_fidelity_section_is_rendered_from_its_results() -> None:
    data = json.loads(tiresias_fidelity.RESULTS.read_text())
    text = tiresias_fidelity.section(*tiresias_fidelity.from_results(data))
    assert text.rstrip("\n") in tiresias_fidelity.REPORT.read_text()
    # Every case beyond 1% of the peer as published shows its worst jobs, job by job.
    for r in data["rows"]:
        if r["case"]["placement"] == "first-fit" and abs(r["diff"]) > 0.01:
            assert r["worst"], r["case"]
