"""The shortcuts that make the Tesserae placement fast must not change a single decision.

Each shortcut (skipping a decision whose inputs are the last one's, admitting the leading running
jobs at once, the one-type admission, the vectorised one-type walk, reusing the Assignment of a job
kept in place, stopping the regrouped layout once it cannot win, HiGHS called without linprog) is
switched off in turn and the whole simulation compared, finish time by finish time, with the
default run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy.optimize import linprog
from scipy.sparse import csr_matrix

from tesserae.config import RunSpec, build_scheduler, parse_run_label
from tesserae.core.cluster import parse_cluster_spec
from tesserae.placement import _packing
from tesserae.placement._shortcuts import Shortcuts
from tesserae.placement.tesserae import TesseraePlacement
from tesserae.profiles.default_model import DefaultModel
from tesserae.scheduler import Scheduler
from tesserae.sim.engine import SimConfig, Simulator
from tesserae.traces import generate_workload

#: Each shortcut of the placement switched off, by the name the test reports ("skip", the scheduler's
#: replay of an unchanged decision, is switched off by hiding the placement's ``Replayable`` side).
OFF = {
    "skip": Shortcuts(),
    "bulk": Shortcuts(keep_running_in_bulk=False),
    "one-type": Shortcuts(one_type=False),
    "walk": Shortcuts(admit_in_bulk=False),
    "reuse": Shortcuts(reuse_kept=False),
    "prune": Shortcuts(prune_regrouped=False),
}


class Without:
    """An object seen without some of its optional capabilities (``BulkKeeper``, ``BulkAdmitter``,
    ``Replayable``): the protocols find no such method, everything else is the object's."""

    def __init__(self, inner: Any, *hidden: str) -> None:
        self._inner, self._hidden = inner, hidden

    def __getattr__(self, name: str) -> Any:
        if name in self._hidden:
            raise AttributeError(name)
        return getattr(self._inner, name)


def _run(label: str, cluster_spec: str, switch_off: str | None) -> tuple[np.ndarray, dict[str, Any], int]:
    """(finish times, summary, skipped decisions) of one simulation with one shortcut switched off.

    The default run is the scheduler the CLI builds; a run with a shortcut off gets a placement
    built with those shortcuts and the same options (a difference in the options would show too).
    """
    cluster = parse_cluster_spec(cluster_spec)
    model = DefaultModel()
    specs = generate_workload(100, 1.5, cluster, model, seed=5)
    run = parse_run_label(label, RunSpec())
    sched = build_scheduler(cluster, model, run)
    if switch_off is not None:
        placement = TesseraePlacement(packing=run.packing, round_seconds=run.round_seconds,
                                      restart_overhead=run.restart_overhead, shortcuts=OFF[switch_off])
        sched = Scheduler(cluster, sched.policy, placement, model, sched.config)
    assert isinstance(sched.placement, TesseraePlacement)
    stats = sched.placement.stats
    if switch_off == "skip":
        sched.placement = Without(sched.placement, "repeat_last_round")
    skipped = [0]
    repeat = stats.repeat_last_round

    def counted() -> None:
        skipped[0] += 1
        repeat()

    stats.repeat_last_round = counted  # type: ignore[method-assign]  # counts, changes nothing
    res = Simulator(specs, cluster, sched, SimConfig(round_seconds=300.0, restart_overhead=30.0)).run()
    summary = {k: v for k, v in res.scheduler_summary.items() if k != "layout_seconds"}
    return res.table.finish.copy(), summary, skipped[0]


@pytest.mark.parametrize("cluster_spec", ["4x4", "2x4:k80,2x4:v100"])
@pytest.mark.parametrize("label", ["las:tesserae+packing", "tiresias-las:tesserae+packing", "fifo:tesserae"])
def test_each_shortcut_leaves_the_simulation_unchanged(label: str, cluster_spec: str) -> None:
    finish, summary, skipped = _run(label, cluster_spec, None)
    assert np.isfinite(finish).all()
    offs = ("skip", "bulk", "one-type", "walk", "reuse", "prune") if ":" not in cluster_spec \
        else ("skip", "bulk", "reuse", "prune")
    for off in offs:
        f, s, n = _run(label, cluster_spec, off)
        assert np.array_equal(f, finish), off
        assert s == summary, off
        if off == "skip":
            assert n == 0
    assert skipped > 0  # the workload has decisions whose inputs repeat: the skip was exercised


def test_direct_dual_simplex_returns_linprogs_vertex() -> None:
    """Same solver, same options: the same vertex, also among tied optima (weights drawn from few values)."""
    rng = np.random.default_rng(3)
    for trial in range(300):
        h, o = (int(v) for v in rng.integers(1, 10, 2))
        e = int(rng.integers(1, h * o + 1))
        cells = rng.choice(h * o, size=e, replace=False)
        ii, jj = cells // o, cells % o
        w = rng.choice([0.2, 0.25, 0.5], size=e) if trial % 2 else rng.uniform(0.1, 1.0, e)
        hc, oc = rng.integers(1, 15, h), rng.integers(1, 15, o)
        ub = np.minimum(hc[ii], oc[jj]).astype(float)
        rhs = np.concatenate([hc, oc]).astype(float)
        cols = np.arange(e)
        a = csr_matrix((np.ones(2 * e), (np.concatenate([ii, h + jj]), np.concatenate([cols, cols]))),
                       shape=(h + o, e))
        ref = linprog(-w, A_ub=a, b_ub=rhs, bounds=np.c_[np.zeros(e), ub], method="highs-ds").x
        assert np.array_equal(_packing._dual_simplex(-w, ii, h + jj, h + o, ub, rhs), ref)


def test_reusing_kept_assignments_keeps_strategies_unchanged() -> None:
    """With a profile of parallelism strategies (a pair relaunches a job with another one), reusing
    the Assignment of a job on the same GPUs, partner and strategy changes nothing."""
    from tesserae.core.jobs import JobSpec
    from tesserae.profiles.colocation import ColocationTable
    from tesserae.profiles.norm_speed import NormSpeedData, norm_speed_model

    table = ColocationTable(solo={("L", 2): [("S1", 1.0), ("S2", 0.8)]},
                            pairs={("L", 2, "S1", "s", 2): (0.7, 0.6), ("L", 2, "S2", "s", 2): (0.9, 0.7)})
    model = norm_speed_model(NormSpeedData(table, {}, {("s", 2)}), name="toy strategies")
    rng = np.random.default_rng(2)
    jobs = [JobSpec(i, float(rng.uniform(0, 6000)), 2, "L" if i % 3 else "s", float(rng.uniform(300, 4000)))
            for i in range(40)]
    cluster = parse_cluster_spec("2x4")
    results = []
    for reuse in (True, False):
        run = RunSpec(policy="las", placement="tesserae", packing=True, round_seconds=300, restart_overhead=30)
        base = build_scheduler(cluster, model, run)
        placement = TesseraePlacement(packing=True, shortcuts=Shortcuts(reuse_kept=reuse))
        sched = Scheduler(cluster, base.policy, placement, model, base.config)
        res = Simulator(jobs, cluster, sched, SimConfig(round_seconds=300.0, restart_overhead=30.0)).run()
        results.append((res.table.finish.copy(), res.table.strategy_changes.sum(),
                        {k: v for k, v in res.scheduler_summary.items() if k != "layout_seconds"}))
    (f1, c1, s1), (f2, c2, s2) = results
    assert np.array_equal(f1, f2) and c1 == c2 and s1 == s2
    assert c1 > 0  # strategies did change: the shortcut met jobs relaunched with another strategy
