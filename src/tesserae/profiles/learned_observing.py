"""How :class:`~tesserae.profiles.learned.RateEstimator` takes an observation: the checks that refuse a
hostile or implausible one (counted by reason), and the running sums it adds to (alone, spread, next
to a partner). A mixin of the estimator, one purpose per file; it works on the estimator's arrays.
"""

from __future__ import annotations

import math

import numpy as np

#: A pair entry's key (slot, partner's slot, GPU type) as one integer, ``pair_key``: a dict of ints pops ~3x
#: faster than one of tuples, and a refresh drops thousands of entries when old jobs are forgotten.
SLOT_BITS, TYPE_BITS = 23, 16


def pair_key(s: int, p: int, t: int) -> int:
    return (s << (SLOT_BITS + 1 + TYPE_BITS)) | (p << TYPE_BITS) | t


class Observing:
    """The estimator's observation path (see module docstring)."""

    def observe(self, job_id: int, iterations: float, seconds: float, gpu_type: str, consolidated: bool = True,
                partner: int | None = None, run: int | None = None) -> str | None:
        """One progress report: ``iterations`` over ``seconds`` of computing on ``gpu_type``. Returns None
        when it was taken, else why it was refused (also counted in ``rejected``)."""
        why = self._check(job_id, iterations, seconds, gpu_type, partner, run)
        if why is not None:
            self.rejected[why] += 1
            return why
        s = self._slot[int(job_id)]
        t = self.type_index[gpu_type]
        if iterations == 0:  # a stall: nothing computed in all that time
            self._touch(s)
            self._dirty = True
            self.stalls += 1
            if partner is None:
                return None
            y = float(self.m[s, t]) + math.log(self.config.pair_floor)
            self._add_pair(s, self._slot[int(partner)], t, y, stall=True)
            return None
        y = math.log(float(iterations) / float(seconds))
        why = self._plausible(s, t, y, consolidated, partner)
        if why is not None:
            self.rejected[why] += 1
            return why
        self._touch(s)
        self._dirty = True
        self.accepted += 1
        if partner is not None:
            if not consolidated:
                self.ignored += 1
                return None
            self._add_pair(s, self._slot[int(partner)], t, y)
        elif consolidated:
            self._welford(float(self.cnt[s, t]), float(self.s1[s, t]), y)
            self.cnt[s, t] += 1.0
            self.s1[s, t] += y
            self.s2[s, t] += y * y
        else:
            self.spc[s, t] += 1.0
            self.sps[s, t] += y
        return None

    def _check(self, job_id: int, iterations: float, seconds: float, gpu_type: str, partner: int | None,
               run: int | None) -> str | None:
        try:
            s = self._slot.get(int(job_id))
        except (TypeError, ValueError, OverflowError):
            return "unknown job"
        if s is None:
            return "unknown job"
        try:
            it, sec = float(iterations), float(seconds)
        except (TypeError, ValueError, OverflowError):
            return "not a number"
        if not (math.isfinite(it) and math.isfinite(sec)):
            return "not a number"
        if it < 0 or sec < 0:
            return "negative"
        if sec < max(self.config.min_seconds, 1e-9):
            return "too short"
        if it / sec > self.config.max_rate:
            return "absurd"
        if gpu_type not in self.type_index:
            return "unknown GPU type"
        if partner is not None:
            try:
                p = self._slot.get(int(partner))
            except (TypeError, ValueError, OverflowError):
                return "unknown partner"
            if p is None or p == s:
                return "unknown partner"
        if run is not None and int(run) < int(self.run[s]):
            return "stale run"
        return None

    def _plausible(self, s: int, t: int, y: float, consolidated: bool, partner: int | None) -> str | None:
        """Refuse a rate that the job's own history contradicts (it has one once a refresh fitted its data)."""
        if self.fitted[s]:
            pred = float(self.m[s, t])
            if partner is not None:
                pred += self.pair_mu + float(self.a_m[s]) + float(self.b_m[self._slot[int(partner)]])
            elif not consolidated:
                pred += float(self.sp_m[s])
            if abs(y - pred) > math.log(self.config.absurd_factor):
                return "absurd"
        if partner is None and consolidated and self.cnt[s, t] >= 2:
            mean = self.s1[s, t] / self.cnt[s, t]
            if abs(y - mean) > math.log(self.config.inconsistent_factor):
                return "inconsistent"
        return None

    def _add_pair(self, s: int, p: int, t: int, y: float, stall: bool = False) -> None:
        key = pair_key(s, p, t)
        e = self._pair_of.get(key)
        if e is None:
            mine = self._partners[s] = self._entries(s, self._partners.get(s), self.pj)
            if len(mine) >= self.config.max_partners:
                oldest = min(mine, key=lambda x: self.pstamp[x])
                mine.remove(oldest)
                self._drop_pairs(np.array([oldest]))
            if not self._free_pairs:
                self._grow_pairs(self._pcap * 2)
            e = self._free_pairs.pop()
            self._pair_of[key] = e
            self._partners.setdefault(s, []).append(e)
            self.pj[e], self.pp[e], self.pt[e] = s, p, t
            self.pc[e] = self.ps1[e] = self.ps2[e] = self.pstall[e] = 0.0
            self.palive[e] = True
            mate = self._pair_of.get(pair_key(p, s, t), -1)  # the same pair seen from the partner's side
            self.pmate[e] = mate
            if mate >= 0:
                self.pmate[mate] = e
        if not stall and self.pstall[e] == 0:
            self._welford(float(self.pc[e]), float(self.ps1[e]), y)
        self.pc[e] += 1.0
        self.pstall[e] += stall
        self.ps1[e] += y
        self.ps2[e] += y * y
        self.pstamp[e] = self._stamp
        self.shared[s] = self.shared[p] = True

    def _welford(self, count: float, total: float, y: float) -> None:
        """Pooled within-entry sum of squares for the noise estimate, one observation at a time."""
        if count >= 1:
            mean = total / count
            new_mean = (total + y) / (count + 1)
            self._ss += (y - mean) * (y - new_mean)
            self._dof += 1.0

    def _entries(self, s: int, index: list[int] | None, side: np.ndarray) -> list[int]:
        """The live entries of an index list that still belong to slot ``s`` on that side."""
        if not index:
            return []
        return [e for e in index if self.palive[e] and side[e] == s]

    def _drop_pairs(self, entries: np.ndarray) -> None:
        keys = (self.pj[entries] << (SLOT_BITS + 1 + TYPE_BITS)) | (self.pp[entries] << TYPE_BITS) | self.pt[entries]
        pop = self._pair_of.pop
        for key in keys.tolist():
            pop(key, None)
        self.palive[entries] = False
        mates = self.pmate[entries]
        self.pmate[mates[mates >= 0]] = -1
        self.pmate[entries] = -1
        self._free_pairs.extend(entries.tolist())
