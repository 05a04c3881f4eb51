"""PNG plots for compare: JCT CDFs, and GPUs in use / queue length over time."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from tesserae.core.jobs import JobStatus
from tesserae.sim.engine import SimResult


def completed_jcts(result: SimResult) -> np.ndarray:
    t = result.table
    done = t.status == JobStatus.DONE
    return t.finish[done] - t.submit[done]


def plot_jct_cdf(results: Mapping[str, SimResult | np.ndarray], path: Path, title: str = "JCT CDF") -> None:
    """One CDF per label; values are SimResults or arrays of completed jobs' JCTs (seconds)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, res in results.items():
        jct = np.sort(res if isinstance(res, np.ndarray) else completed_jcts(res))
        if jct.size:
            ax.step(jct / 3600.0, np.arange(1, jct.size + 1) / jct.size, where="post", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("JCT (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_timeline(results: Mapping[str, SimResult | Mapping[str, np.ndarray]], path: Path, gpus: int) -> None:
    """GPUs in use and queue length; values are SimResults or their ``timeline`` dicts."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for label, res in results.items():
        tl = res.timeline if isinstance(res, SimResult) else res
        hours = tl["time"] / 3600.0
        top.step(hours, tl["gpus_in_use"], where="post", label=label, linewidth=0.8)
        bottom.step(hours, tl["queued"], where="post", label=label, linewidth=0.8)
    top.axhline(gpus, color="grey", linestyle=":", linewidth=0.8)
    top.set_ylabel("GPUs in use")
    bottom.set_ylabel("jobs queued")
    bottom.set_xlabel("simulated time (hours)")
    top.legend(fontsize=8)
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
