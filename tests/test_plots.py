"""compare's plots: one timeline row per run with a labelled capacity line, titles that name the workload."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from tesserae.sim.plots import jct_cdf_figure, timeline_figure


def full_cluster(gpus: int, shift: float) -> dict[str, np.ndarray]:
    """A run that holds every GPU most of the time (the case that used to be unreadable)."""
    t = np.arange(0.0, 50 * 3600, 1800) + shift
    return {"time": t, "gpus_in_use": np.where(t < 40 * 3600, gpus, gpus // 2),
            "queued": (np.arange(t.size) % 7).astype(float)}


def test_timeline_has_one_row_per_run_and_a_labelled_capacity() -> None:
    runs = {f"run{k}": full_cluster(8, 60.0 * k) for k in range(5)}
    fig = timeline_figure(runs, 8, title="synthetic: 9 jobs on 2x4:v100")
    axes = np.array(fig.axes).reshape(5, 2)
    assert [ax.get_title(loc="left") for ax in axes[:, 0]] == list(runs)
    for use, queue in axes:
        assert "capacity: 8 GPUs" in [t.get_text() for t in use.texts]
        assert any(np.allclose(line.get_ydata(), 8) for line in use.get_lines())  # the capacity line itself
        assert len(queue.get_lines()) == 1
    colours = {use.get_lines()[0].get_color() for use in axes[:, 0]}
    assert len(colours) == 5  # each run its own colour, the same in both columns
    assert [q.get_lines()[0].get_color() for q in axes[:, 1]] == [u.get_lines()[0].get_color() for u in axes[:, 0]]
    assert fig.get_suptitle() == "GPUs in use and jobs queued: synthetic: 9 jobs on 2x4:v100"


def test_jct_cdf_title_names_the_workload_and_runs_differ_in_style() -> None:
    fig = jct_cdf_figure({"a": np.array([3600.0, 7200.0]), "b": np.array([60.0, 7200.0])}, "trace.csv on 2x4")
    ax = fig.axes[0]
    assert ax.get_title() == "Job completion time CDF: trace.csv on 2x4"
    (a, b) = ax.get_lines()
    assert (a.get_color(), a.get_linestyle()) != (b.get_color(), b.get_linestyle())
    assert a.get_linestyle() != b.get_linestyle()


def test_compare_writes_titled_pngs(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    r = subprocess.run([sys.executable, "-m", "tesserae.cli", "compare", "--run", "fifo", "--run", "las", "--run",
                        "srtf", "--jobs", "40", "--load", "1.5", "--cluster", "2x4", "--seed", "4", "--out", str(out),
                        "-q"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    workload = "synthetic: 40 jobs, load 1.5, gavel GPU mix, seed 4 on 2x4:v100"
    with Image.open(out / "timeline.png") as png:
        assert png.text["Title"].startswith(f"GPUs in use and jobs queued: {workload}")
    with Image.open(out / "jct_cdf.png") as png:
        assert png.text["Title"].startswith(f"Job completion time CDF: {workload}")
