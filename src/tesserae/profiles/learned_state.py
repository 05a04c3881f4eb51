"""The learned estimator's state as a bounded JSON-safe document, and back (``to_state``/``from_state``).
A mixin of :class:`~tesserae.profiles.learned.RateEstimator`.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any, Self

import numpy as np

from tesserae.core.throughput import ThroughputModel
from tesserae.profiles.learned_config import STATE_FORMAT, LearnedConfig
from tesserae.profiles.learned_observing import pair_key


class Persistence:
    """Save and restore an estimator (see module docstring)."""

    def to_state(self) -> dict[str, Any]:
        """Everything learned, JSON-safe and bounded (see module docstring); posteriors are refitted on load."""
        live = np.flatnonzero(self.alive)
        live = live[np.argsort(self.stamp[live], kind="stable")]
        jobs = []
        for s in live.tolist():
            jobs.append({"id": int(self.ids[s]), "n": int(self.n[s]), "declared": self.declared[s],
                         "run": int(self.run[s]), "finished": bool(self.finished[s]),
                         "cnt": self.cnt[s].tolist(), "s1": self.s1[s].tolist(), "s2": self.s2[s].tolist(),
                         "spc": self.spc[s].tolist(), "sps": self.sps[s].tolist(),
                         "attained": float(self.attained[s]), "explored": float(self.explored[s]),
                         "probes": int(self.probes[s]),
                         "posterior": [*self.m[s].tolist(), *self.P[s].ravel().tolist(), float(self.a_m[s]),
                                       float(self.a_v[s]), float(self.b_m[s]), float(self.b_v[s]),
                                       float(self.sp_m[s]), float(self.sp_v[s]), float(self._fit_w[s])]})
        pairs = [[int(self.ids[self.pj[e]]), int(self.ids[self.pp[e]]), self.gpu_types[int(self.pt[e])],
                  float(self.pc[e]), float(self.ps1[e]), float(self.ps2[e]), float(self.pstall[e])]
                 for e in np.flatnonzero(self.palive)[np.argsort(self.pstamp[self.palive], kind="stable")].tolist()]
        return {"format": STATE_FORMAT, "gpu_types": list(self.gpu_types), "config": asdict(self.config),
                "counters": {"accepted": self.accepted, "stalls": self.stalls, "ignored": self.ignored,
                             "rejected": dict(self.rejected)},
                "noise": [self._ss, self._dof],
                "fits": {"population": [*self.pop_mu.tolist(), *self.pop_sigma.ravel().tolist()],
                         "pair": [self.pair_mu, self.pair_var],
                         "families": [[name, n, float(self._fam_w[f]), float(self._fam_a[f]),
                                       float(self._fam_b[f]), float(self._fam_sp[f]), float(self._fam_n[f])]
                                      for f, (name, n) in enumerate(self._family_names)]},
                "jobs": jobs, "pairs": pairs}

    @classmethod
    def from_state(cls, state: dict[str, Any], prior_model: ThroughputModel | None = None) -> Self:
        """An estimator from ``to_state``'s output; ValueError when the document is not one."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ValueError(f"not a learned-estimator state (format {STATE_FORMAT!r} expected)")
        try:
            est = cls(state["gpu_types"], prior_model, LearnedConfig(**state["config"]))
            T = est.T
            c = state["counters"]
            est.accepted, est.stalls, est.ignored = int(c["accepted"]), int(c["stalls"]), int(c["ignored"])
            est.rejected.update({str(k): int(v) for k, v in c["rejected"].items()})
            ss, dof = (float(v) for v in state["noise"])
            if not (math.isfinite(ss) and math.isfinite(dof) and ss >= 0 and dof >= 0):
                raise ValueError("bad noise figures")
            est._ss, est._dof = ss, dof
            for j in state["jobs"]:
                est.register(int(j["id"]), int(j["n"]), j["declared"])
                s = est._slot[int(j["id"])]
                est.run[s] = int(j["run"])
                for name in ("cnt", "s1", "s2", "spc", "sps"):
                    row = np.asarray(j[name], dtype=np.float64)
                    if row.shape != (T,) or not np.isfinite(row).all():
                        raise ValueError(f"job {j['id']}: bad {name}")
                    getattr(est, name)[s] = row
                est.attained[s], est.explored[s] = float(j["attained"]), float(j["explored"])
                est.probes[s] = int(j["probes"])
                post = np.asarray(j["posterior"], dtype=np.float64)
                if post.shape != (T + T * T + 7,) or not np.isfinite(post).all():
                    raise ValueError(f"job {j['id']}: bad posterior")
                est.m[s], est.P[s] = post[:T], post[T:T + T * T].reshape(T, T)
                est.fitted[s] = bool(est.cnt[s].any() or est.spc[s].any())
                (est.a_m[s], est.a_v[s], est.b_m[s], est.b_v[s], est.sp_m[s], est.sp_v[s],
                 est._fit_w[s]) = post[T + T * T:]
                if j["finished"]:
                    est.finish(int(j["id"]))
            for jid, pid, g, count, y1, y2, stalls in state["pairs"]:
                s, p, t = est._slot[int(jid)], est._slot[int(pid)], est.type_index[str(g)]
                values = np.array([count, y1, y2, stalls], dtype=np.float64)
                if not np.isfinite(values).all() or values[0] < 1:
                    raise ValueError(f"pair {jid}-{pid}: bad figures")
                est._add_pair(s, p, t, 0.0)
                e = est._pair_of[pair_key(s, p, t)]
                est.pc[e], est.ps1[e], est.ps2[e], est.pstall[e] = (float(v) for v in values)
            fits = state["fits"]
            pop = np.asarray(fits["population"], dtype=np.float64)
            pair = np.asarray(fits["pair"], dtype=np.float64)
            if pop.shape != (T + T * T,) or pair.shape != (2,) or not (np.isfinite(pop).all() and
                                                                       np.isfinite(pair).all()):
                raise ValueError("bad population fits")
            est.pop_mu, est.pop_sigma = pop[:T], pop[T:].reshape(T, T)
            est.pair_mu, est.pair_var = float(pair[0]), float(pair[1])
            for name, n, *values in fits["families"]:
                f = est._families.get((str(name), int(n)))
                v = np.asarray(values, dtype=np.float64)
                if f is None or v.shape != (5,) or not np.isfinite(v).all():
                    raise ValueError(f"family {name!r}: bad fits")
                est._fam_w[f], est._fam_a[f], est._fam_b[f], est._fam_sp[f], est._fam_n[f] = v
            est.tau2 = est._noise()
            est._fit_families(est.tau2)  # the family means, exactly as before: from the members' data
        except (KeyError, TypeError, IndexError) as exc:
            raise ValueError(f"learned-estimator state is malformed: {exc!r}") from None
        est._dirty = False  # everything fitted came with the state
        return est
