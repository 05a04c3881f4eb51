"""Tables that fit the terminal (issue 30): optional columns leave by priority, no value is ever cut."""

from __future__ import annotations

from io import StringIO

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.text import Text

from tesserae.cli_fit import GAP, Col, fitted_columns, print_table

COLS = [Col("ID", "right"), Col("NAME", wrap=True, min_width=8), Col("USER", priority=3), Col("STATE"),
        Col("GPUS", "right"), Col("ITERS", priority=7), Col("WAITED", priority=5), Col("RAN", priority=6),
        Col("PREEMPT", "right", priority=8), Col("ON GPUS / WHY", wrap=True, priority=1, min_width=16),
        Col("STARTS", priority=2), Col("ENDS", priority=2)]
ROWS = [["1", "resnet50 training with a long name", "alice", Text("running", style="green"), "8", "1200/5000",
         "0.0s", "1h02m", "0", "0,1,2,3,4,5,6,7", "-", "in 3h10m"],
        ["12", "bert", "bob", Text("preempted", style="magenta"), "4", "10/400", "3h20m", "2m10s", "3",
         "#1 waiting for 4 GPUs (2 free)", "in 1h31m", "in 2h45m"]]


def printed(width: int, cols: list[Col] = COLS, rows: list = ROWS) -> list[str]:  # type: ignore[type-arg]
    buf = StringIO()
    print_table(Console(file=buf, width=width, color_system=None), cols, rows)
    return buf.getvalue().splitlines()


def test_at_80_columns_the_least_important_go_and_states_stay_whole() -> None:
    lines = printed(80)
    assert all(len(line) <= 80 for line in lines), lines
    header = lines[0].split()
    assert header[:5] == ["ID", "NAME", "USER", "STATE", "GPUS"] and header[-2:] == ["STARTS", "ENDS"]
    assert "PREEMPT" not in header and "ITERS" not in header and "RAN" not in header
    text = "\n".join(lines)
    assert "running" in text and "preempted" in text and "in 3h10m" in text and "in 2h45m" in text
    assert lines[-1] == "(left out at 80 columns: ITERS, WAITED, RAN, PREEMPT; --json shows every field)"


def test_at_160_columns_everything_fits_and_nothing_is_left_out() -> None:
    lines = printed(160)
    assert lines[0].split() == ["ID", "NAME", "USER", "STATE", "GPUS", "ITERS", "WAITED", "RAN", "PREEMPT", "ON",
                                "GPUS", "/", "WHY", "STARTS", "ENDS"]
    assert "left out" not in "\n".join(lines) and all(len(line) <= 160 for line in lines)
    assert "resnet50 training with a long name" in lines[1]  # room enough: the name is not wrapped


def test_order_of_leaving_is_priority_then_rightmost() -> None:
    kept = [COLS[i].header for i, _ in fitted_columns(COLS, ROWS, 60)]
    assert kept == ["ID", "NAME", "STATE", "GPUS", "ON GPUS / WHY", "STARTS"]  # ENDS: same priority, rightmost
    assert [COLS[i].header for i, _ in fitted_columns(COLS, ROWS, 1)] == ["ID", "NAME", "STATE", "GPUS"]


def test_cells_are_text_not_markup() -> None:
    lines = printed(120, [Col("NAME")], [["[red]x[/]"], ["[/]"]])
    assert lines[1].strip() == "[red]x[/]" and lines[2].strip() == "[/]"


words = st.text(alphabet="abcdefghij-_.:/0123456789", min_size=1, max_size=14)


@settings(max_examples=60, deadline=None)
@given(cells=st.lists(st.tuples(words, st.lists(words, min_size=1, max_size=6).map(" ".join), words, words),
                      min_size=1, max_size=5),
       width=st.integers(min_value=50, max_value=200))
def test_every_kept_column_that_does_not_wrap_shows_its_values_whole(cells: list, width: int) -> None:  # type: ignore[type-arg]
    """Whatever the values and the width: when the columns that must stay fit, every line fits, and each
    value of a column that does not wrap is on one line, whole."""
    cols = [Col("STATE"), Col("REASON", wrap=True, min_width=8), Col("A", priority=1), Col("B", priority=2)]
    rows = [list(c) for c in cells]
    kept = fitted_columns(cols, rows, width)
    widths = dict(kept)
    assert widths[0] == max(len("STATE"), *(len(r[0]) for r in rows))
    must = widths[0] + min(max(len(r[1]) for r in rows), max(8, len("REASON"))) + GAP
    lines = printed(width, cols, rows)
    if must <= width:
        assert all(len(line) <= width for line in lines), lines
    body = "\n".join(lines)
    for r in rows:
        for i, _ in kept:
            if i != 1:
                assert r[i] in body


def _summary(label: str, avg: float, lifecycle: bool = False) -> dict:  # type: ignore[type-arg]
    s = {"label": label, "policy": label, "completed": 400, "rejected": 0, "unfinished": 0, "avg_jct": avg,
         "median_jct": avg / 2, "p95_jct": avg * 3, "p99_jct": avg * 4, "makespan": 1.9e6,
         "avg_queueing_delay": avg / 3, "avg_first_start_delay": avg / 9, "utilization": 0.71, "preemptions": 4793,
         "migrations": 12, "decision_seconds_mean": 0.00075, "restart_cost": None}
    if lifecycle:
        s["lifecycle"] = {"failed": 1, "timed_out": 2, "cancelled": 3, "retries": 4}
    return s


def test_simulator_summaries_split_over_tables_instead_of_cutting_labels() -> None:
    """The demo's five runs at 80 columns were cut ('las:tesse…', 'utilizati…'): now split, whole."""
    from tesserae.cli_tables import summary_tables

    labels = ["fifo(no-backfill):consolidated", "fifo", "srtf", "tiresias-las:tiresias", "las:tesserae+packing"]
    runs = [_summary(label, 3600.0 * (i + 1), lifecycle=i == 2) for i, label in enumerate(labels)]
    for width, tables in ((80, 4), (120, 2), (160, 1)):
        made = summary_tables("400 jobs, load 1.5 on 16x4 (default model, a model)", runs, width)
        assert len(made) == tables, width
        buf = StringIO()
        console = Console(file=buf, width=width, color_system=None)
        for t in made:
            console.print(t)
        out = buf.getvalue()
        assert all(len(line) <= width for line in out.splitlines()), out
        assert "…" not in out
        for label in labels:
            assert label in out
        for metric in ("jobs done / rejected / unfinished", "avg queueing, every wait (h)", "utilization",
                       "failed / timed out / cancelled / retries", "preemptions"):
            assert out.count(metric) == tables
        assert "2.00 (2.00x)" in out and "5.00 (5.00x)" in out  # ratios to the first run, in every part
        if tables > 1:
            assert f"(2 of {tables}; ratios to fifo(no-backfill):consolidated)" in " ".join(out.split())


def test_sweep_and_queue_tables_fit_80_columns() -> None:
    from tesserae.cli_tables import print_fitted, queue_table, sweep_table

    rows = [{"label": "gavel-maxmin(plain):tesserae+packing", "load": 1.2, "seeds": 5, "mean": 36000.0,
             "sd": 3600.0, "ci_low": 31530.0, "ci_high": 40470.0, "ratio": 0.81, "ratio_low": 0.7,
             "ratio_high": 0.93}]
    queue = {"path": "org/team-with-a-long-name/alice", "guarantee": 8, "jobs": 120, "avg_jct": 7200.0,
             "share_of_gpu_time": 0.31, "guaranteed_share": 0.25, "satisfaction": 1.24,
             "borrowed_gpu_seconds": 36000.0, "reclaims": 3}
    summary = {"tenancy": "borrow", "jain_satisfaction": 0.97, "queues": [queue]}
    for width in (80, 160):
        buf = StringIO()
        console = Console(file=buf, width=width, color_system=None)
        print_fitted(console, sweep_table(rows, 5, width))
        print_fitted(console, queue_table(summary, width))
        out = buf.getvalue()
        assert all(len(line) <= width for line in out.splitlines()), out
        for value in ("10.00", "[8.76, 11.24]", "0.81x", "[0.70, 0.93]", "31.0%", "25.0%", "1.240"):
            assert value in out, (value, out)
        assert ("left out at 80 columns" in out) == (width == 80)
