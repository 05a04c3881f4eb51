"""The learned estimator's state as a bounded JSON-safe document, and back (``to_state``/``from_state``), and
what it shows of one job and of itself (``describe``, ``counters``). A mixin of
:class:`~tesserae.profiles.learned.RateEstimator`.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any, Self

import numpy as np

from tesserae.core.throughput import ThroughputModel
from tesserae.profiles.learned_config import STATE_FORMAT, LearnedConfig


class Persistence:
    """Save, restore and show an estimator (see module docstring)."""

    def describe(self, job_id: int) -> dict[str, Any]:
        """Everything known about one job, JSON-safe: per GPU type its rate, sd, measured or prior, and
        its measured partners (what ``tesserae show`` and the dashboard display)."""
        s = self._slot[int(job_id)]
        per_type = {}
        for g, t in self.type_index.items():
            e = self.estimate(job_id, g)
            per_type[g] = {"rate": e.rate, "sd": e.sd, "measured": e.measured, "source": e.source,
                           "observations": int(self.cnt[s, t])}
        partners = []
        for e in self._entries(s, self._partners.get(s), self.pj):
            p = int(self.pp[e])
            alone = float(self.m[s, self.pt[e]])
            partners.append({"partner": int(self.ids[p]), "gpu_type": self.gpu_types[int(self.pt[e])],
                             "observations": int(self.pc[e]),
                             "factor": math.exp(min(float(self.ps1[e] / self.pc[e]) - alone, 0.0))})
        return {"job_id": int(job_id), "num_gpus": int(self.n[s]), "declared_type": self.declared[s],
                "gpu_types": per_type, "partners": partners,
                "sharing": {"sensitivity": float(self.a_m[s]), "pressure": float(self.b_m[s]),
                            "per_gpu_type": {g: {"sensitivity": float(self.a_m[s] + self.ta_m[s, t]),
                                                 "pressure": float(self.b_m[s] + self.tb_m[s, t])}
                                             for g, t in self.type_index.items()}},
                "spread_factor": math.exp(float(self.sp_m[s])),
                "explored_gpu_seconds": float(self.explored[s]), "gpu_seconds": float(self.attained[s])}

    def counters(self) -> dict[str, Any]:
        return {"observations": self.accepted, "rejected": dict(sorted(self.rejected.items())),
                "rejected_total": int(sum(self.rejected.values())), "stalls": self.stalls,
                "ignored": self.ignored, "noise_sd": math.sqrt(self.tau2), "pair_factor_mean": math.exp(self.pair_mu),
                "families": len(self._family_names), "jobs": int(self.alive.sum()), "vetoed_pairs": self.vetoes}

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
                                       float(self.sp_m[s]), float(self.sp_v[s]), float(self._fit_w[s]),
                                       *self.ta_m[s].tolist(), *self.ta_v[s].tolist(), *self.tb_m[s].tolist(),
                                       *self.tb_v[s].tolist()]})
        pairs = [[int(self.ids[self.pj[e]]), int(self.ids[self.pp[e]]), self.gpu_types[int(self.pt[e])],
                  float(self.pc[e]), float(self.ps1[e]), float(self.ps2[e]), float(self.pstall[e])]
                 for e in np.flatnonzero(self.palive)[np.argsort(self.pstamp[self.palive], kind="stable")].tolist()]
        return {"format": STATE_FORMAT, "gpu_types": list(self.gpu_types), "config": asdict(self.config),
                "counters": {"accepted": self.accepted, "stalls": self.stalls, "ignored": self.ignored,
                             "rejected": dict(self.rejected)},
                "noise": [self._ss, self._dof],
                "fits": {"population": [*self.pop_mu.tolist(), *self.pop_sigma.ravel().tolist()],
                         "pair": [self.pair_mu, self.pair_var, *self.pair_dmu.tolist(), *self.pair_dmu_v.tolist()],
                         "families": [[name, n, float(self._fam_w[f]), float(self._fam_a[f]),
                                       float(self._fam_b[f]), float(self._fam_sp[f]), float(self._fam_n[f]),
                                       *self._fam_ta[f].tolist(), *self._fam_tb[f].tolist(),
                                       *self._fam_tna[f].tolist(), *self._fam_tnb[f].tolist()]
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
                # a state saved before the per-type pair terms lacks their 4 T figures: they start at their prior
                if post.shape not in ((T + T * T + 7,), (T + T * T + 7 + 4 * T,)) or not np.isfinite(post).all():
                    raise ValueError(f"job {j['id']}: bad posterior")
                if post.size > T + T * T + 7:
                    est.ta_m[s], est.ta_v[s], est.tb_m[s], est.tb_v[s] = post[T + T * T + 7:].reshape(4, T)
                    post = post[:T + T * T + 7]
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
                e = est._pair_of[(s, p, t)]
                est.pc[e], est.ps1[e], est.ps2[e], est.pstall[e] = (float(v) for v in values)
            fits = state["fits"]
            pop = np.asarray(fits["population"], dtype=np.float64)
            pair = np.asarray(fits["pair"], dtype=np.float64)
            if pop.shape != (T + T * T,) or pair.shape not in ((2,), (2 + 2 * T,)) or not (
                    np.isfinite(pop).all() and np.isfinite(pair).all()):
                raise ValueError("bad population fits")
            est.pop_mu, est.pop_sigma = pop[:T], pop[T:].reshape(T, T)
            est.pair_mu, est.pair_var = float(pair[0]), float(pair[1])
            if pair.size > 2:
                est.pair_dmu, est.pair_dmu_v = pair[2:2 + T].copy(), pair[2 + T:].copy()
            for name, n, *values in fits["families"]:
                f = est._families.get((str(name), int(n)))
                v = np.asarray(values, dtype=np.float64)
                if f is None or v.shape not in ((5,), (5 + 4 * T,)) or not np.isfinite(v).all():
                    raise ValueError(f"family {name!r}: bad fits")
                est._fam_w[f], est._fam_a[f], est._fam_b[f], est._fam_sp[f], est._fam_n[f] = v[:5]
                if v.size > 5:
                    est._fam_ta[f], est._fam_tb[f], est._fam_tna[f], est._fam_tnb[f] = v[5:].reshape(4, T)
            est.tau2 = est._noise()
            est._fit_families(est.tau2)  # the family means, exactly as before: from the members' data
        except (KeyError, TypeError, IndexError) as exc:
            raise ValueError(f"learned-estimator state is malformed: {exc!r}") from None
        est._dirty = False  # everything fitted came with the state
        return est
