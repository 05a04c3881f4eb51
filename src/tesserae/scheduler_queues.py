"""The queue level of a decision (DESIGN §8): GPUs per tenant queue, then who runs inside each.

``QueueStep.walk`` replaces the allocator's single walk down the policy's order when tenant queues
are configured (it calls the same ``tesserae.allocator.Allocator`` for the previous round's facts
and the bulk admission of kept jobs):

1. Rows are grouped by leaf queue; inside a queue, running production jobs come first (they are
   never preempted), then production, normal and preemptible jobs, each in the queue policy's
   order. A production job beyond its queue's guarantee cannot run (it may not borrow).
2. Budgets: ``tesserae.scheduling.quota.queue_budgets`` over each queue's demand (the GPUs its
   jobs ask for): guarantees first, idle quota lent by weighted max-min.
3. Pass 1 walks the rows, interleaving queues by how far into its budget each row reaches
   (cumulative GPUs / budget), and admits each gang that still fits its queue's budget (skip and
   continue inside a queue, as the allocator does). The budgets sum to at most the cluster, so a
   queue under its guarantee with waiting demand gets it whenever the placement can place it.
4. Pass 2 offers what is still free (gangs that did not fit a budget leave GPUs over) to the
   rows left, most under-served queue first ((GPUs past budget) / weight), within every
   borrowing limit on the path to the top.

A queue whose budget shrinks (the lender's jobs arrived) keeps only the rows that fit it, in its
own order: the lowest-ranked jobs lose the borrowed GPUs first (reclaim by preemption).

``QueueStep.observe`` keeps the per-queue accounts after every decision, whether the queues
are enforced or only reported (a single global queue measured per tenant): GPU-seconds used,
GPU-seconds entitled (min(guarantee, demand) over time) and met, GPU-seconds above guarantee
(borrowed), and reclaims (a running job that held GPUs beyond its queue's guarantee, counted in
its queue's order, and is stopped). Deterministic: no wall clock, ties broken by config order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from tesserae.allocator import Allocator
from tesserae.core.jobs import JobStatus, JobTable
from tesserae.core.plan import Assignment
from tesserae.core.queues import QueueTree, RowQueues
from tesserae.placement.base import RoundPlacer
from tesserae.scheduling.quota import queue_budgets

#: Why a row did not run, as ``QueueStep.reason`` words it (index = code).
REASONS = ("", "waiting for free GPUs", "queue at its share; waiting for idle GPUs to borrow",
           "queue at its borrowing limit", "production job beyond its queue's guarantee")
ADMITTED, WAIT_GPUS, WAIT_SHARE, AT_LIMIT, PROD_OVER = range(5)


def grouped_cumsum(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Cumulative sum restarting at each new value of ``group`` (rows sorted by group)."""
    if values.size == 0:
        return values.astype(np.int64)
    total = np.cumsum(values)
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    offset = np.repeat(total[starts] - values[starts], np.diff(np.r_[starts, values.size]))
    return total - offset


class QueueStep:
    """Budgets and the two-pass walk of tenant queues; the accounts behind per-queue metrics."""

    def __init__(self, tree: QueueTree, *, enforce: bool = True) -> None:
        self.tree, self.enforce = tree, enforce
        self.rows = RowQueues(tree)
        leaves = np.asarray(tree.leaves, dtype=np.int64)
        self._leaf_nodes = leaves
        self._leaf_guarantee = tree.guarantee[leaves]
        self._leaf_cap = np.array([min(tree.limit[a] for a in chain) for chain in tree.ancestors])
        n, nl = tree.num_nodes, tree.num_leaves
        # (node, leaf) pairs with the leaf under the node: node totals are a bincount over them
        # (no BLAS call: a matrix product this small costs more in thread wake-ups than in work).
        self._pair_node = np.array([a for chain in tree.ancestors for a in chain], dtype=np.int64)
        self._pair_leaf = np.array([p for p, chain in enumerate(tree.ancestors) for _ in chain], dtype=np.int64)
        self._under = np.zeros((n, nl), dtype=bool)
        self._under[self._pair_node, self._pair_leaf] = True
        #: The latest decision, per node: budget, GPUs in use, GPUs asked for; per row: why it waits.
        self.budget = np.zeros(n, dtype=np.int64)
        self.used = np.zeros(n, dtype=np.int64)
        self.demand = np.zeros(n, dtype=np.int64)
        self.borrowing = np.zeros(n, dtype=np.int64)
        self._reason_rows = np.empty(0, dtype=np.int64)
        self._reason_code = np.empty(0, dtype=np.int8)
        # Accounts (GPU-seconds, per node) and the marks they are taken from.
        self.used_gs = np.zeros(n)
        self.entitled_gs = np.zeros(n)
        self.met_gs = np.zeros(n)
        self.borrowed_gs = np.zeros(n)
        self.demand_gs = np.zeros(n)
        self.reclaims = np.zeros(n, dtype=np.int64)
        self._table: Any = None
        self._last_now = math.nan
        self._mark = np.empty(0)
        self._pos = np.empty(0, dtype=np.int64)
        self._running_prev = np.empty(0, dtype=np.int64)
        self._active_prev = np.empty(0, dtype=np.int64)
        self._borrowed_prev = np.empty(0, dtype=np.int64)

    # ------------------------------------------------------------------ the walk
    def _leaf_order(self, alloc: Allocator, order: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Rows grouped by leaf in each queue's own order; their leaf, class rank, gang, whether each ran
        last round and whether it is held (inside its minimum run quantum).

        Pinned first: running production jobs, and held jobs.
        """
        table = alloc.table
        leaf_of, cls_of = self.rows(table)
        rows = np.asarray(order, dtype=np.int64)
        leaf, cls = leaf_of[rows], cls_of[rows]
        ran, held = alloc.ran_last(rows), alloc.is_held(rows)
        pinned = (ran & (cls == 0)) | held
        idx = np.lexsort((np.arange(rows.size), cls, ~pinned, leaf))
        return rows[idx], leaf[idx], cls[idx], table.num_gpus[rows[idx]], ran[idx], held[idx]

    def walk(self, alloc: Allocator, placer: RoundPlacer, order: np.ndarray) -> np.ndarray:
        """Admit rows through ``placer.try_admit`` queue by queue; returns the merged order.

        Running jobs inside their minimum run quantum (``hold_until``) keep their GPUs even beyond
        their queue's budget: they rank first in their queue, so a reclaim takes the queue's other
        jobs, and waits for a quantum to end only when none is left to take.
        """
        no_backfill = alloc.no_backfill
        rows, leaf, cls, gang, ran, held = self._leaf_order(alloc, order)
        n = rows.size
        g_leaf = self._leaf_guarantee
        cum = grouped_cumsum(gang, leaf)
        prod = cls == 0
        prod_out = prod & (gang > g_leaf[leaf])  # a production job larger than its guarantee never runs
        # Production jobs ask for at most their queue's guarantee: beyond it they may not run.
        nl = self.tree.num_leaves
        demand = np.bincount(leaf[~prod], weights=gang[~prod], minlength=nl) + np.minimum(
            np.bincount(leaf[prod & ~prod_out], weights=gang[prod & ~prod_out], minlength=nl), g_leaf)
        budget_nodes = queue_budgets(self.tree, demand.astype(np.int64), int(placer.free))
        self.budget = budget_nodes
        budget = budget_nodes[self._leaf_nodes]
        b_row = budget[leaf]
        over = cum > b_row
        value = np.where(over, (cum - b_row) / self.tree.weight[self._leaf_nodes][leaf], cum / np.maximum(b_row, 1))
        # Rows that ran last round and fit their budget whatever else happens go first: they are
        # admitted in any case, and first they keep their GPUs (and admit in bulk where the placer can).
        keep = (ran & ~over & ~prod_out) | held
        m = np.lexsort((np.arange(n), leaf, value, over, ~keep))
        rows, leaf, cls, gang, over, prod_out = rows[m], leaf[m], cls[m], gang[m], over[m], prod_out[m]
        admitted = np.zeros(n, dtype=bool)
        left = budget.astype(np.int64).tolist()  # budget left per leaf
        prod_left = g_leaf.astype(np.int64).tolist()
        k = int(keep.sum())
        if k:
            bulk = alloc.keep_running_prefix(placer, rows[:k])
            admitted[:bulk] = True
            for i in range(bulk, k):  # a placer without bulk admission: one by one
                admitted[i] = placer.try_admit(int(rows[i]))
            kept = admitted[:k]
            used_k = np.bincount(leaf[:k][kept], weights=gang[:k][kept], minlength=len(left)).astype(np.int64)
            left = (np.asarray(left) - used_k).tolist()
            pk = kept & (cls[:k] == 0)
            prod_k = np.bincount(leaf[:k][pk], weights=gang[:k][pk], minlength=len(left)).astype(np.int64)
            prod_left = (np.asarray(prod_left) - prod_k).tolist()
        leaf_l, gang_l, cls_l, rows_l = leaf.tolist(), gang.tolist(), cls.tolist(), rows.tolist()

        def admit_within_budget(candidates: np.ndarray) -> None:
            for i in candidates.tolist():
                q, g = leaf_l[i], gang_l[i]
                if g > left[q] or (cls_l[i] == 0 and g > prod_left[q]):
                    continue
                if g > placer.free:
                    if placer.free == 0:
                        return
                    continue
                if placer.try_admit(rows_l[i]):
                    admitted[i] = True
                    left[q] -= g
                    if cls_l[i] == 0:
                        prod_left[q] -= g
                elif no_backfill:
                    left[q] = -1  # YARN-CS inside a queue: nothing behind a job that did not fit

        # Rows inside their budget in their queue's order first; then, skip and continue, the rows
        # behind that fit what their queue's budget has left (few: only gangs as small as the residue).
        idx = np.arange(n)
        admit_within_budget(idx[(idx >= k) & ~over & ~prod_out])
        residue = np.asarray(left, dtype=np.int64)
        later = np.flatnonzero(over & ~prod_out & ~admitted & (gang <= residue[leaf]) & (idx >= k))
        if later.size and placer.free > 0:
            admit_within_budget(later)
        used_leaf = np.bincount(leaf[admitted], weights=gang[admitted], minlength=len(left)).astype(np.int64)
        used_nodes = self._up(used_leaf)
        node_used = used_nodes.astype(np.int64).tolist()
        limit = self.tree.limit.tolist()
        code = np.full(n, WAIT_GPUS, dtype=np.int8)
        code[prod_out | (~admitted & (cls == 0) & (gang > np.asarray(prod_left, dtype=np.int64)[leaf]))] = PROD_OVER
        if self.enforce and placer.free > 0:
            # Headroom of each leaf under every limit on its path; it only shrinks during this pass,
            # so a gang above it now can never be admitted here.
            room = self.tree.limit - used_nodes
            headroom = np.full(self.tree.num_leaves, np.inf)
            np.minimum.at(headroom, self._pair_leaf, room[self._pair_node])
            cand = ~admitted & ~prod_out & (cls != 0)
            code[cand & (gang > headroom[leaf])] = AT_LIMIT
            rest = np.flatnonzero(cand & (gang <= placer.free) & (gang <= headroom[leaf]))
            if no_backfill:
                rest = rest[np.asarray(left, dtype=np.int64)[leaf[rest]] >= 0]
            if rest.size:
                suffix_min = np.minimum.accumulate(gang[rest][::-1])[::-1]
                anc = self.tree.ancestors
                for j, i in enumerate(rest.tolist()):
                    free = placer.free
                    if suffix_min[j] > free:
                        break
                    q, g = leaf_l[i], gang_l[i]
                    if g > free:
                        continue
                    chain = anc[q]
                    if any(node_used[a] + g > limit[a] for a in chain):
                        code[i] = AT_LIMIT
                        continue
                    if placer.try_admit(rows_l[i]):
                        admitted[i] = True
                        for a in chain:
                            node_used[a] += g
        waiting = ~admitted & over & (code == WAIT_GPUS)
        code[waiting] = WAIT_SHARE
        code[admitted] = ADMITTED
        self._reason_rows, self._reason_code = rows, code
        return rows

    def never_runs(self, table: JobTable) -> np.ndarray:
        """Rows that can never run: larger than their queue may ever hold (its limit or an
        ancestor's), or production jobs larger than their queue's guarantee."""
        leaf, cls = self.rows(table)
        cap = np.where(cls == 0, self._leaf_guarantee[leaf], self._leaf_cap[leaf])
        return table.num_gpus > cap

    def reason(self, row: int) -> str:
        """Why ``row`` did not run at the latest decision ('' if it ran or is unknown)."""
        hit = np.flatnonzero(self._reason_rows == row)
        return REASONS[int(self._reason_code[hit[0]])] if hit.size else ""

    # ------------------------------------------------------------------ accounts
    def observe(self, now: float, table: JobTable, active: np.ndarray, order: np.ndarray,
                assignments: Mapping[int, Assignment], stopped: list[int]) -> None:
        """Book the interval since the previous decision, then note this decision's state."""
        leaf_of, cls_of = self.rows(table)
        nl = self.tree.num_leaves
        if table is not self._table:  # a new table (the runtime's): accounts restart from here
            self._table = table
            self._mark = table.attained.copy()
            self._pos = np.full(table.n, np.iinfo(np.int64).max, dtype=np.int64)
            self._active_prev = np.empty(0, dtype=np.int64)
            self._running_prev = np.empty(0, dtype=np.int64)
            self._borrowed_prev = np.empty(0, dtype=np.int64)
            self._last_now = now
        elif self._mark.size < table.n:
            self._mark = np.concatenate([self._mark, table.attained[self._mark.size:]])
            self._pos = np.concatenate([self._pos, np.full(table.n - self._pos.size, np.iinfo(np.int64).max)])
        dt = now - self._last_now if math.isfinite(self._last_now) else 0.0
        g = self.tree.guarantee.astype(np.float64)
        if dt > 0:
            ran = self._running_prev  # only rows that held GPUs since the last decision attained anything
            delta = table.attained[ran] - self._mark[ran]
            used_leaf = np.bincount(leaf_of[ran], weights=delta, minlength=nl)
            prev = self._active_prev
            end = np.where(np.isnan(table.finish[prev]), now, np.minimum(table.finish[prev], now))
            ask = table.num_gpus[prev] * np.maximum(end - self._last_now, 0.0)
            demand_leaf = np.bincount(leaf_of[prev], weights=ask, minlength=nl)
            used_n = self._up(used_leaf)
            demand_n = self._up(demand_leaf)
            entitled = np.minimum(g * dt, demand_n)
            self.used_gs += used_n
            self.demand_gs += demand_n
            self.entitled_gs += entitled
            self.met_gs += np.minimum(used_n, entitled)
            self.borrowed_gs += np.maximum(used_n - g * dt, 0.0)
        running = np.fromiter(assignments, dtype=np.int64, count=len(assignments))
        used_leaf = np.bincount(leaf_of[running], weights=table.num_gpus[running], minlength=nl)
        if self._borrowed_prev.size and stopped:
            # A reclaim: a job running on borrowed GPUs is stopped and its queue holds fewer GPUs
            # than before (not a job its own queue's policy swapped for another of the same queue).
            lost = self._borrowed_prev[np.isin(self._borrowed_prev, np.asarray(stopped, dtype=np.int64))]
            lost = lost[table.status[lost] != JobStatus.DONE]
            shrank = used_leaf < self.used[self._leaf_nodes]
            lost = lost[shrank[leaf_of[lost]]]
            if lost.size:
                self.reclaims += self._up(np.bincount(leaf_of[lost], minlength=nl)).astype(np.int64)
        self._mark[running] = table.attained[running]
        self._running_prev = running
        self._last_now = now
        self._active_prev = np.asarray(active, dtype=np.int64).copy()
        # This decision: who holds GPUs beyond its queue's guarantee (the queue's lowest-ranked).
        act = np.asarray(active, dtype=np.int64)
        self.demand = self._up(np.bincount(leaf_of[act], weights=table.num_gpus[act], minlength=nl)).astype(np.int64)
        if running.size == 0:
            self.used = np.zeros(self.tree.num_nodes, dtype=np.int64)
            self.borrowing = self.used.copy()
            self._borrowed_prev = running
            return
        order = np.asarray(order, dtype=np.int64)
        pos = self._pos
        pos[order] = np.arange(order.size)
        r_leaf = leaf_of[running]
        idx = np.lexsort((pos[running], cls_of[running], r_leaf))
        pos[order] = np.iinfo(np.int64).max
        running, r_leaf = running[idx], r_leaf[idx]
        gang = table.num_gpus[running]
        beyond = grouped_cumsum(gang, r_leaf) > self._leaf_guarantee[r_leaf]
        self._borrowed_prev = running[beyond]
        self.used = self._up(used_leaf).astype(np.int64)
        self.borrowing = np.maximum(self.used - self.tree.guarantee, 0)

    def _up(self, leaf_values: np.ndarray) -> np.ndarray:
        """Totals per node (leaves and every queue above them) of per-leaf values."""
        return np.bincount(self._pair_node, weights=np.asarray(leaf_values, dtype=np.float64)[self._pair_leaf],
                           minlength=self.tree.num_nodes)

    def close(self, table: JobTable) -> None:
        """Book the time after the last decision, up to the last completion (end of a simulation)."""
        done = table.finish[np.isfinite(table.finish)]
        end = float(done.max()) if done.size else self._last_now
        if math.isfinite(self._last_now) and end > self._last_now:
            empty = np.empty(0, dtype=np.int64)
            self.observe(end, table, empty, empty, {}, [])

    def in_queue(self, node: int, leaves: np.ndarray) -> np.ndarray:
        """Which of these leaf positions lie under ``node`` (itself included)."""
        return self._under[node, leaves]

    def snapshot(self) -> list[dict[str, Any]]:
        """Per queue, as of the latest decision and over the run so far: what reports and /metrics show."""
        out = []
        for q in self.tree.describe():
            n = self.tree.index(q["name"])
            q.update({"budget": int(self.budget[n]), "gpus_in_use": int(self.used[n]),
                      "gpus_borrowed": int(self.borrowing[n]), "gpus_demanded": int(self.demand[n]),
                      "gpu_seconds": float(self.used_gs[n]), "borrowed_gpu_seconds": float(self.borrowed_gs[n]),
                      "entitled_gpu_seconds": float(self.entitled_gs[n]), "met_gpu_seconds": float(self.met_gs[n]),
                      "reclaims": int(self.reclaims[n])})
            out.append(q)
        return out

    def summary(self) -> dict[str, Any]:
        return {"tenancy": "quotas" if self.enforce else "global queue (reported per queue)",
                "reclaims": int(self.reclaims[list(self.tree.top)].sum())}
