"""How :class:`~tesserae.profiles.learned.RateEstimator` fits: the priors (profile, family, population),
the posteriors, the veto of harmful pairs and the noise refit, recomputed by ``refresh``. A mixin of
the estimator, so that each file holds one purpose; it works on the estimator's arrays.
"""

from __future__ import annotations

import math

import numpy as np

from tesserae.profiles import _learned_fit as fit
from tesserae.profiles.learned_config import MAX_TAGS


class Fitting:
    """The estimator's fitting steps (see module docstring)."""

    def _priors(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each slot's prior (mean, covariance): its profile entry; its family's mean without its own data
        (leave-one-out), widened by the spread within a family; or the population's fit."""
        fam = self.fam[slots]
        has = fam >= 0
        if slots.size and has.all():  # every job has a family (family hints): nothing of the population's
            cov = fit.inv(self._fam_lam[fam] - self._info[slots])
            mu, sig = fit.matvec(cov, self._fam_eta[fam] - self._infoy[slots]), cov + self.within
        else:
            mu = np.broadcast_to(self.pop_mu, (slots.size, self.T)).copy()
            sig = np.broadcast_to(self.pop_sigma, (slots.size, self.T, self.T)).copy()
            if has.any():
                f, sl = fam[has], slots[has]
                cov = fit.inv(self._fam_lam[f] - self._info[sl])
                mu[has] = fit.matvec(cov, self._fam_eta[f] - self._infoy[sl])
                sig[has] = cov + self.within
        prof = self.profiled[slots]
        if prof.any():
            mu[prof] = self.shape[slots[prof]]
            sig[prof] = fit.prior_covariance(self.T, fit.PROFILE_SD, fit.PROFILE_SD)
        return mu, sig

    def _fit_families(self, tau2: float) -> None:
        """Every family's mean from its members' alone observations (an exact conjugate fit, redone from the
        data at each refresh), with the population's fit as its prior."""
        F = len(self._family_names)
        if F == 0:
            return
        members = np.flatnonzero(self.alive & (self.fam >= 0) & (self.cnt > 0).any(axis=1))
        self._info[:] = 0.0
        self._infoy[:] = 0.0
        if members.size:
            cnt = self.cnt[members]
            ybar = np.where(cnt > 0, self.s1[members] / np.maximum(cnt, 1.0), 0.0)
            info, infoy = fit.member_information(cnt / tau2, ybar, self.within)
            self._info[members], self._infoy[members] = info, infoy
        else:
            info, infoy = self._info[members], self._infoy[members]
        lam, eta = fit.family_fit(self.fam[members], F, info, infoy, self.pop_mu, self.pop_sigma)
        cov = fit.inv(lam)
        self._fam_lam, self._fam_eta = lam, eta
        self._fam_mu = fit.matvec(cov, eta)
        self._fam_sigma = cov + self.within
        self._fam_w = np.bincount(self.fam[members], minlength=F).astype(np.float64)

    def _pair_prior_means(self, slots: np.ndarray) -> tuple[np.ndarray, ...]:
        """Priors of a, b and the spread factor for each slot: (a mean, b mean, their variance, spread mean,
        its variance). Without a family: 0 (the built-in spread) and the population's sd. With one: the
        other members' mean (leave-one-out, shrunk to the population) and a variance that narrows, as
        members are measured, to the sd within a family (jobs of one type share GPUs alike)."""
        n = slots.size
        a, b, sp = np.zeros(n), np.zeros(n), self.sp_prior[slots].copy()
        var = np.full(n, fit.PAIR_SD**2)
        sp_var = np.full(n, fit.SPREAD_SD**2)
        fam = self.fam[slots]
        has = fam >= 0
        if has.any():
            has = fit.subset(has)
            f, sl = fam[has], slots[has]
            w = self._fit_w[sl]
            others = self._fam_n[f] - w
            denom = fit.KAPPA_FAMILY + others
            a[has] = (self._fam_a[f] - w * self.a_m[sl]) / denom
            b[has] = (self._fam_b[f] - w * self.b_m[sl]) / denom
            sp[has] = (fit.KAPPA_FAMILY * sp[has] + self._fam_sp[f] - w * self.sp_m[sl]) / denom
            shrink = fit.KAPPA_FAMILY / denom
            var[has] = fit.WITHIN_FAMILY_SD**2 + fit.PAIR_SD**2 * shrink
            sp_var[has] = fit.WITHIN_FAMILY_SD**2 + fit.SPREAD_SD**2 * shrink
        return a, b, var, sp, sp_var

    @property
    def dirty(self) -> bool:
        """Whether an observation arrived since the last refresh (a decision should then refresh first)."""
        return self._dirty

    def refresh(self) -> None:
        """Recompute the posteriors of the active jobs, then the population and family fits (see module
        docstring): one Gauss-Seidel sweep, warm-started from the last refresh (online EM). A finished
        job's posterior stays as it was (its data no longer changes); an active job without data is its
        prior. Nothing to do when no observation arrived since the last refresh."""
        if self._forget_due:
            self._forget_due = False
            self._forget()
        if not self._dirty:
            return
        self._dirty = False
        self.refreshes += 1
        T, cap = self.T, self._cap
        active = self.alive & ~self.finished
        e = np.flatnonzero(self.palive)
        pj, pp = self.pj[e], self.pp[e]
        touch = np.flatnonzero(active[pj] | active[pp])  # entries between two finished jobs are frozen
        e, pj, pp = e[touch], pj[touch], pp[touch]
        pt, pc = self.pt[e], self.pc[e]
        ybar = self.ps1[e] / pc
        stalled = self.pstall[e] > 0
        self.tau2 = tau2 = self._noise()
        self._fit_families(tau2)
        data = (self.cnt > 0).any(axis=1) | (self.spc > 0).any(axis=1)
        data[pj] = True
        data[pp] = True
        upd = np.flatnonzero(data & active)
        bare = np.flatnonzero(~data & active)
        if bare.size:
            self.m[bare], self.P[bare] = self._priors(bare)
        if upd.size == 0:
            return
        k = upd.size
        pos = np.full(cap, -1, dtype=np.int64)
        pos[upd] = np.arange(k)
        qj, qp = pos[pj], pos[pp]  # compact index of each entry's job / partner (-1: not updated)
        a0, b0, ab_var, sp0, sp_var0 = self._pair_prior_means(upd)
        m, P = self.m, self.P
        a_m, a_v, b_m, b_v = self.a_m, self.a_v, self.b_m, self.b_v
        res2 = fit.PAIR_RESIDUAL_SD**2
        pair_mu, pair_var = self.pair_mu, self.pair_var
        r0 = res2 + tau2 / pc  # each entry's residual and noise variance
        # The entries whose job is updated (the others' job has finished), as an index: taken once, and not
        # at all when they are all of them (the usual case).
        im = np.flatnonzero(qj >= 0)
        every = im.size == e.size

        def mine(x: np.ndarray) -> np.ndarray:
            return x if every else x[im]

        qjm = mine(qj)
        # The sharing terms as they stand (a's and b's are updated below, after the alone rates).
        amj, avj, bmp, bvp = a_m[pj], a_v[pj], b_m[pp], b_v[pp]
        # alone rates, from alone runs and (the pair terms taken as known) paired ones
        prec, num = self.cnt[upd] / tau2, self.s1[upd] / tau2
        if im.size:
            w = fit.inv_sum(r0, avj, bvp, pair_var)
            wz = fit.diff(ybar, pair_mu, amj, bmp)
            wz *= w
            flat = qjm * T + mine(pt)
            prec += np.bincount(flat, weights=mine(w), minlength=k * T).reshape(k, T)
            num += np.bincount(flat, weights=mine(wz), minlength=k * T).reshape(k, T)
        prior_mu, prior_sig = self._priors(upd)
        m_u, P_u = fit.gaussian_posterior(prior_mu, fit.inv(prior_sig), prec, num)
        m_u = fit.clamp_shape(m_u, self.shape[upd], math.log(self.config.ratio_bound))
        m[upd], P[upd] = m_u, P_u
        self.fitted[upd] = True
        lim = math.log(1.0 / self.config.pair_floor)
        if e.size:
            at = pj if T == 1 else pj * T + pt  # each entry's (job, GPU type) in m flattened ...
            xv = P.reshape(-1)[at if T == 1 else at * T + pt]  # ... and its variance's in P flattened
            base = ybar - m.reshape(-1)[at]
            c = r0 + xv
            # the population's mean pair factor (a stall, out of memory, says nothing about sharing speed)
            w = fit.inv_sum(c, avj, bvp)
            w[stalled] = 0.0
            wz = fit.diff(base, amj, bmp)
            wz *= w
            pm, pv = fit.scalar_posterior(np.array([self.pair_mu0]), fit.PAIR_MEAN_SD**2,
                                          np.array([w.sum()]), np.array([wz.sum()]))
            pair_mu, pair_var = float(np.clip(pm[0], -lim, 0.0)), float(pv[0])
            # each job's sensitivity a, then each partner's pressure b
            w = fit.inv_sum(c, bvp, pair_var)
            wz = fit.diff(base, pair_mu, bmp)
            wz *= w
            prec_a = np.bincount(qjm, weights=mine(w), minlength=k)
            num_a = np.bincount(qjm, weights=mine(wz), minlength=k)
            am, av = fit.scalar_posterior(a0, ab_var, prec_a, num_a)
            a_m[upd], a_v[upd] = np.clip(am, -lim, lim), av
            theirs = np.flatnonzero(qp >= 0)
            w = fit.inv_sum(c, a_v[pj], pair_var)
            wz = fit.diff(base, pair_mu, a_m[pj])
            wz *= w
            prec_b = np.bincount(qp[theirs], weights=w[theirs], minlength=k)
            num_b = np.bincount(qp[theirs], weights=wz[theirs], minlength=k)
            bm, bv = fit.scalar_posterior(b0, ab_var, prec_b, num_b)
            b_m[upd], b_v[upd] = np.clip(bm, -lim, lim), bv
            self.pair_mu, self.pair_var = pair_mu, pair_var
        # spread factors
        spc = self.spc[upd]
        si, ti = np.nonzero(spc > 0)
        if si.size:
            z = self.sps[upd][si, ti] / spc[si, ti] - m_u[si, ti]
            w = 1.0 / (tau2 / spc[si, ti] + P_u[si, ti, ti] + res2)
            sp_prec = np.bincount(si, weights=w, minlength=k)
            sp_num = np.bincount(si, weights=w * z, minlength=k)
        else:
            sp_prec = sp_num = np.zeros(k)
        spm, spv = fit.scalar_posterior(sp0, sp_var0, sp_prec, sp_num)
        self.sp_m[upd], self.sp_v[upd] = np.clip(spm, math.log(0.05), 0.0), spv
        self._refit(data & self.alive & ~self.profiled)
        self._veto(e, pj, pp, pt, ybar, stalled)

    def _veto(self, e: np.ndarray, pj: np.ndarray, pp: np.ndarray, pt: np.ndarray, ybar: np.ndarray,
              stalled: np.ndarray) -> None:
        """Gandiva's introspection: a pair measured in both directions slower than its two jobs alone on a
        GPU type (factors summing below 1, against the jobs' alone rates there; a stall counts as 0) is
        vetoed there: both jobs carry a tag naming the pair and the type, and two jobs with a common tag are
        shown as unable to share GPUs of its type (:mod:`learned_classes`)."""
        T = self.T
        for s, p, t in self._judge(e, pj, pp, pt, ybar, stalled):
            if (s, p, t) in self._vetoed:
                continue
            # One GPU type's veto: a pair slower than alone on one type is often faster on another (on Gavel's
            # table, 157 of 325 single-GPU pairs are slower together on some type, 17 on all three). The tag
            # names its type (tag mod the number of types, ``learned_classes``).
            self._next_tag += 1
            tag = self._next_tag * T + t
            self._vetoed[(s, p, t)] = tag
            for x in (s, p):
                tags = self._tags.setdefault(x, [])
                tags.append(tag)
                del tags[:-MAX_TAGS]
            self.vetoes += 1

    def _judge(self, e: np.ndarray, pj: np.ndarray, pp: np.ndarray, pt: np.ndarray, ybar: np.ndarray,
               stalled: np.ndarray) -> list[tuple[int, int, int]]:
        """The pairs (job, partner, GPU type; job < partner) slower together than alone, in entry order.
        Judged where both directions of the pair were measured (``pmate``, kept as entries come and go: no
        search over all entries) and both jobs were measured alone on some GPU type (a job measured only in
        pairs is shown as unable to share until it is: ``presented``); else a factor says little."""
        mate = self.pmate[e]
        sel = (mate >= 0) & (pj < pp)
        if not sel.any():
            return []
        alone_any = (self.cnt > 0).any(axis=1)
        sel &= alone_any[pj] & alone_any[pp]
        mine = np.flatnonzero(sel)
        js, ps, ts, mate = pj[mine], pp[mine], pt[mine], mate[mine]
        ys = np.concatenate([ybar[mine], self.ps1[mate] / self.pc[mate]])
        factor = self._pair_factor(np.concatenate([js, ps]), np.concatenate([ts, ts]), ys,
                                   np.concatenate([stalled[mine], self.pstall[mate] > 0]))
        bad = factor[: js.size] + factor[js.size:] < 1.0
        return list(zip(js[bad].tolist(), ps[bad].tolist(), ts[bad].tolist(), strict=True))

    def _pair_factor(self, jobs: np.ndarray, types: np.ndarray, ybar: np.ndarray, stalled: np.ndarray
                     ) -> np.ndarray:
        """Pair entries' factors: the mean log-rate ``ybar`` of each job next to its partner on a GPU type
        against the job's alone rate there, at most 1; a stall counts as 0."""
        alone = self.m[jobs, types]
        # A job never measured alone on the pair's type (a newcomer paired on arrival, or moved there in a
        # pair): its posterior there is fitted from the pair's own figures, so the pair would look as good
        # as its rate, and it would never be judged. Its reference is the estimate from its alone runs on
        # the other types (the prior's shape carries them over) and its prior, without the pair data.
        here = self.cnt[jobs, types] > 0
        if not here.all():
            need = np.unique(jobs[~here])
            mu, sig = self._priors(need)
            m_alone, _ = fit.gaussian_posterior(mu, fit.inv(sig), self.cnt[need] / self.tau2,
                                                self.s1[need] / self.tau2)
            m_alone = fit.clamp_shape(m_alone, self.shape[need], math.log(self.config.ratio_bound))
            alone[~here] = m_alone[np.searchsorted(need, jobs[~here]), types[~here]]
        return np.where(stalled, 0.0, np.exp(np.minimum(ybar - alone, 0.0)))

    def _drop_tags(self, slots: np.ndarray) -> None:
        """Jobs that ended (or were forgotten) take their vetoes with them; their partners drop the tags."""
        if not self._vetoed:
            return
        gone = set(slots.tolist())
        for (s, p, t), tag in list(self._vetoed.items()):
            if s in gone or p in gone:
                del self._vetoed[(s, p, t)]
                for x in (s, p):
                    tags = self._tags.get(x)
                    if tags is not None and tag in tags:
                        tags.remove(tag)
        for x in gone:
            self._tags.pop(x, None)

    def tags(self, slots: np.ndarray) -> np.ndarray:
        """The veto tags of each slot, -1 padded (at most MAX_TAGS, the most recent)."""
        out = np.full((slots.size, MAX_TAGS), -1, dtype=np.int64)
        tagged = [s for s, tags in self._tags.items() if tags]
        if tagged:
            for i in np.flatnonzero(np.isin(slots, tagged)).tolist():
                tags = self._tags[int(slots[i])]
                out[i, : len(tags)] = tags
        return out

    def _noise(self) -> float:
        """Observation noise (log variance) pooled over repeated observations, shrunk to the configured one."""
        return fit.pooled_noise(self._ss, self._dof, self.config.noise)

    def _refit(self, measured: np.ndarray) -> None:
        """The population and family priors from the measured jobs (an EM M-step, bounded influence)."""
        meas = np.flatnonzero(measured)
        self._fit_w[:] = 0.0
        if meas.size == 0:
            return
        m, P = self.m[meas], self.P[meas]
        w = fit.influence_weights(m, self.pop_mu, self.pop_sigma)
        self._fit_w[meas] = w
        self.pop_mu, self.pop_sigma = fit.weighted_fit(m, P, w, self.mu0, self.sigma0, fit.KAPPA_POP,
                                                       fit.KAPPA_POP + self.T)
        F = len(self._family_names)
        if F:
            fam = self.fam[meas]
            sel = fit.subset(fam >= 0)
            f, ws = fam[sel], w[sel]
            ms = meas[sel]
            for name, values in (("_fam_a", self.a_m[ms]), ("_fam_b", self.b_m[ms]), ("_fam_sp", self.sp_m[ms])):
                setattr(self, name, np.bincount(f, weights=ws * values, minlength=F))
            self._fam_n = np.bincount(f, weights=ws, minlength=F)
