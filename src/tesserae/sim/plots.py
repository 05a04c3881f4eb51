"""PNG plots for compare: JCT CDFs, and GPUs in use / queue length over time.

Both are titled with the workload and the cluster. The timeline has one row per run (GPUs in use
on the left, against the labelled capacity line; jobs queued on the right), the rows sharing their
axes: runs that keep the cluster full would hide each other if drawn on one panel. Each run keeps
one colour and line style in both plots.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from tesserae.core.jobs import JobStatus, Outcome
from tesserae.sim.engine import SimResult

_LINESTYLES = ("-", "--", "-.", ":")


def _style(k: int) -> dict[str, object]:
    """Colour and line style of the k-th run: told apart in colour, and in grey print by the dashes."""
    return {"color": f"C{k % 10}", "linestyle": _LINESTYLES[k % len(_LINESTYLES)]}


def _wrapped(title: str, width: int) -> str:
    return "\n".join(textwrap.wrap(title, width)) if title else ""


def completed_jcts(result: SimResult) -> np.ndarray:
    t = result.table
    done = (t.status == JobStatus.DONE) & (t.outcome == Outcome.COMPLETED)
    return t.finish[done] - t.submit[done]


def jct_cdf_figure(results: Mapping[str, SimResult | np.ndarray], title: str = "") -> Figure:
    """One CDF per label; values are SimResults or arrays of completed jobs' JCTs (seconds).

    ``title`` names the workload and the cluster (under the heading "Job completion time CDF").
    """
    fig, ax = plt.subplots(figsize=(8, 5))
    for k, (label, res) in enumerate(results.items()):
        jct = np.sort(res if isinstance(res, np.ndarray) else completed_jcts(res))
        if jct.size:
            ax.step(jct / 3600.0, np.arange(1, jct.size + 1) / jct.size, where="post", label=label, linewidth=1.4,
                    **_style(k))
    ax.set_xscale("log")
    ax.set_xlabel("JCT (hours, log scale)")
    ax.set_ylabel("fraction of completed jobs")
    ax.set_title(_wrapped(f"Job completion time CDF: {title}" if title else "Job completion time CDF", 80),
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def plot_jct_cdf(results: Mapping[str, SimResult | np.ndarray], path: Path, title: str = "") -> None:
    _save(jct_cdf_figure(results, title), path, f"Job completion time CDF: {title}")


def timeline_figure(results: Mapping[str, SimResult | Mapping[str, np.ndarray]], gpus: int, title: str = "") -> Figure:
    """GPUs in use and queue length, one row per run; values are SimResults or their ``timeline`` dicts."""
    n = max(len(results), 1)
    fig, axes = plt.subplots(n, 2, figsize=(11, 1.2 + 1.7 * n), sharex=True, sharey="col", squeeze=False)
    timelines = {label: res.timeline if isinstance(res, SimResult) else res for label, res in results.items()}
    most_queued = max((float(np.max(tl["queued"])) for tl in timelines.values() if len(tl["queued"])), default=0.0)
    for k, (label, tl) in enumerate(timelines.items()):
        hours = np.asarray(tl["time"], dtype=float) / 3600.0
        style = _style(k)
        use, queue = axes[k]
        use.fill_between(hours, tl["gpus_in_use"], step="post", alpha=0.25, color=style["color"], linewidth=0)
        use.step(hours, tl["gpus_in_use"], where="post", linewidth=0.9, **style)
        use.axhline(gpus, color="black", linestyle=(0, (4, 3)), linewidth=0.9)
        use.annotate(f"capacity: {gpus} GPUs", xy=(1, gpus), xycoords=("axes fraction", "data"), xytext=(-4, 2),
                     textcoords="offset points", ha="right", va="bottom", fontsize=7.5)
        queue.step(hours, tl["queued"], where="post", linewidth=0.9, **style)
        use.set_title(label, loc="left", fontsize=9, color=style["color"], fontweight="bold")
        use.set_ylim(0, gpus * 1.3)
        top = max(most_queued, 1.0) * 1.1
        queue.set_ylim(-0.03 * top, top)  # a little below 0: an empty queue stays visible above the axis
        queue.yaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
        for ax in (use, queue):
            ax.grid(alpha=0.3)
            ax.tick_params(labelsize=8)
    axes[0][0].annotate("GPUs in use", xy=(0, 1.22), xycoords="axes fraction", fontsize=10, fontweight="bold")
    axes[0][1].annotate("jobs queued", xy=(0, 1.22), xycoords="axes fraction", fontsize=10, fontweight="bold")
    for ax in axes[-1]:
        ax.set_xlabel("simulated time (hours)")
    fig.suptitle(_wrapped(f"GPUs in use and jobs queued: {title}" if title else "GPUs in use and jobs queued", 110),
                 fontsize=11)
    fig.tight_layout()
    return fig


def plot_timeline(results: Mapping[str, SimResult | Mapping[str, np.ndarray]], path: Path, gpus: int,
                  title: str = "") -> None:
    _save(timeline_figure(results, gpus, title), path, f"GPUs in use and jobs queued: {title}")


def _save(fig: Figure, path: Path, title: str) -> None:
    """PNG with its title also in the file's metadata (a tEXt chunk), for tools and tests that read it."""
    fig.savefig(path, dpi=120, metadata={"Title": title, "Software": "tesserae"})
    plt.close(fig)
