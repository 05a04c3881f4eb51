"""The learned scheduler's view: re-keying only what changed gives the view a from-scratch pass gives.

The reference below is the view's classification as it was first written: every active job's
presented estimates requantized with hysteresis and written back, and the re-keyed rows grouped by
``np.unique(axis=0)`` before their key strings are issued. The view's own pass writes back only the
rows whose key changed and groups them by a lexsort; over whole simulated runs (vetoed pairs, two
and three GPU types, arrivals and departures, exploration) both must give every active row the same
key, under the same index.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tesserae.config import RunSpec, build_scheduler
from tesserae.core.cluster import parse_cluster_spec
from tesserae.core.jobs import JobSpec
from tesserae.profiles.learned import MAX_TAGS
from tesserae.profiles.learned_classes import HYSTERESIS, PAIR_STEP, Q_MAX, Q_MIN, RATE_STEP, SPREAD_STEP, UNRUNNABLE
from tesserae.scheduler_learned import LearnedScheduler, distinct_rows
from tesserae.sim.engine import SimConfig, Simulator
from tesserae.sim.learning import prepare
from test_learned_sim import two_kinds, workload


class ReferenceKeys:
    """The class keys' first implementation: every slot requantized and written back at every decision."""

    def __init__(self, num_types: int, max_tags: int) -> None:
        self.T = num_types
        self.steps = np.array([RATE_STEP] * num_types + [PAIR_STEP, PAIR_STEP, SPREAD_STEP])
        self.q = np.zeros((0, num_types + 3 + max_tags), dtype=np.int64)
        self.set = np.zeros(0, dtype=bool)

    def update(self, slots: np.ndarray, shown: dict[str, np.ndarray]) -> np.ndarray:
        cap = int(slots.max()) + 1 if slots.size else 0
        if cap > self.q.shape[0]:
            q = np.zeros((cap, self.q.shape[1]), dtype=np.int64)
            q[: self.q.shape[0]] = self.q
            s = np.zeros(cap, dtype=bool)
            s[: self.set.size] = self.set
            self.q, self.set = q, s
        x, runnable = shown["x"], shown["runnable"]
        xr = np.where(runnable, x, -np.inf)
        best = xr.max(axis=1, keepdims=True)
        rel = np.where(runnable, x - np.where(np.isfinite(best), best, 0.0), 0.0)
        values = np.concatenate([rel, shown["a"][:, None], shown["b"][:, None], shown["spread"][:, None]], axis=1)
        values = np.clip(values / self.steps, Q_MIN, Q_MAX)
        old = self.q[slots]
        n = self.T + 3
        fresh = ~self.set[slots]
        moved = np.abs(values - old[:, :n]) > 0.5 + HYSTERESIS
        new = old.copy()
        new[:, :n] = np.where(moved | fresh[:, None], np.rint(values).astype(np.int64), old[:, :n])
        new[:, : self.T] = np.where(runnable, new[:, : self.T], UNRUNNABLE)
        new[:, n:] = np.sort(shown["tags"], axis=1)
        changed = fresh | (new != old).any(axis=1)
        self.q[slots] = new
        self.set[slots] = True
        return changed


class Checked(LearnedScheduler):
    """A learned scheduler whose every view is compared with the reference pass (module docstring)."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.ref = ReferenceKeys(len(self.cluster.gpu_types), MAX_TAGS)
        self.ref_names: list[str] = []
        self.ref_index: dict[str, int] = {}
        self.ref_type: np.ndarray | None = None
        self.views = 0
        self.rekeyed = 0
        self.tagged = 0

    def view(self, table, active):  # type: ignore[no-untyped-def]
        first = self._base is not table
        v = super().view(table, active)
        active = np.asarray(active, dtype=np.int64)
        if first:
            self.ref_names.append(self._key_names[0])  # the placeholder class of rows not yet active
            self.ref_index[self._key_names[0]] = 0
        if self.ref_type is None or self.ref_type.size < table.n:
            grown = np.zeros(table.n, dtype=np.int64)
            if self.ref_type is not None:
                grown[: self.ref_type.size] = self.ref_type
            self.ref_type = grown
        slots = self._slot_of_row[active]
        shown = self.estimator.presented(slots)  # pure: the same figures the view just read
        changed = self.ref.update(slots, shown)
        if changed.any():
            distinct, inverse = np.unique(self.ref.q[slots[changed]], axis=0, return_inverse=True)
            ids = []
            for q in distinct:
                key = self.keys.key_of(q)
                if key not in self.ref_index:
                    self.ref_index[key] = len(self.ref_names)
                    self.ref_names.append(key)
                ids.append(self.ref_index[key])
            self.ref_type[active[changed]] = np.array(ids, dtype=np.int64)[inverse.ravel()]
        assert np.array_equal(self.keys.q[slots], self.ref.q[slots])
        assert np.array_equal(v.type_idx[active], self.ref_type[active])
        assert self._key_names == self.ref_names
        self.views += 1
        self.rekeyed += int(changed.sum())
        self.tagged += int((shown["tags"] >= 0).any(axis=1).sum())
        return v


def checked_run(specs: list[JobSpec], cluster: str, model, label: RunSpec, seed: int) -> Checked:  # type: ignore[no-untyped-def]
    cl = parse_cluster_spec(cluster)
    learning = prepare("learned", specs, cl, model, rate_noise=0.05, rate_variation=0.2, seed=seed)
    inner = learning.wrap(build_scheduler(cl, learning.scheduler_model, label))
    assert isinstance(inner, LearnedScheduler)
    sched = Checked(inner.cluster, inner.policy, inner.placement, inner.model, inner.config, inner.queues,
                    estimator=inner.estimator)
    assert learning.observer is not None
    learning.observer.scheduler = sched
    learning.scheduler = sched
    Simulator(specs, cl, sched, SimConfig(round_seconds=300.0), **learning.engine_options()).run()
    return sched


def test_the_view_keys_every_job_as_a_from_scratch_pass_does_two_types_with_vetoes() -> None:
    s = checked_run(workload(120), "2x4:k80,2x4:v100", two_kinds(),
                    RunSpec(policy="las", placement="tesserae", packing=True), seed=1)
    assert s.views > 50 and s.rekeyed > 100
    assert s.tagged > 0  # vetoed pairs (tags) were keyed too
    assert s.estimator.vetoes > 0


def test_the_view_keys_every_job_as_a_from_scratch_pass_does_three_types() -> None:
    from tesserae.profiles.default_model import DefaultModel
    from tesserae.traces.synthetic import generate_workload

    cluster = "2x4:k80,2x4:p100,2x4:v100"
    specs = generate_workload(60, 1.2, parse_cluster_spec(cluster), DefaultModel(), 4)
    s = checked_run(specs, cluster, DefaultModel(), RunSpec(policy="tiresias-las", placement="tesserae",
                                                            packing=True), seed=4)
    assert s.views > 50 and s.rekeyed > 100


@settings(max_examples=200, deadline=None)
@given(arrays(np.int64, st.tuples(st.integers(0, 40), st.integers(1, 8)),
              elements=st.sampled_from([UNRUNNABLE, -3, -2, -1, 0, 1, 2, 7, Q_MAX])))
def test_distinct_rows_is_np_unique_over_rows(q: np.ndarray) -> None:
    """The grouping the view uses issues new keys in np.unique's order: the same rows, the same inverse."""
    rows, inverse = distinct_rows(q)
    if q.shape[0] == 0:
        assert rows.shape[0] == 0 and inverse.size == 0
        return
    ref_rows, ref_inverse = np.unique(q, axis=0, return_inverse=True)
    assert np.array_equal(rows, ref_rows)
    assert np.array_equal(inverse, ref_inverse.ravel())
