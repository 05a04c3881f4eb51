"""How :class:`~tesserae.profiles.learned.RateEstimator` fits: the priors (profile, family, population),
the posteriors, the veto of harmful pairs and the noise refit, recomputed by ``refresh``. A mixin of
the estimator, so that each file holds one purpose; it works on the estimator's arrays.
"""

from __future__ import annotations

import math

import numpy as np

from tesserae.profiles import _learned_fit as fit


class Fitting:
    """The estimator's fitting steps (see module docstring)."""

    def _priors(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each slot's prior (mean, covariance): its profile entry; its family's mean without its own data
        (leave-one-out), widened by the spread within a family; or the population's fit."""
        mu = np.broadcast_to(self.pop_mu, (slots.size, self.T)).copy()
        sig = np.broadcast_to(self.pop_sigma, (slots.size, self.T, self.T)).copy()
        fam = self.fam[slots]
        has = fam >= 0
        if has.any():
            f, sl = fam[has], slots[has]
            cov = np.linalg.inv(self._fam_lam[f] - self._info[sl])
            mu[has] = np.einsum("sij,sj->si", cov, self._fam_eta[f] - self._infoy[sl])
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
        lam, eta = fit.family_fit(self.fam[members], F, self._info[members], self._infoy[members], self.pop_mu,
                                  self.pop_sigma)
        cov = np.linalg.inv(lam)
        self._fam_lam, self._fam_eta = lam, eta
        self._fam_mu = np.einsum("fij,fj->fi", cov, eta)
        self._fam_sigma = cov + self.within
        self._fam_w = np.bincount(self.fam[members], minlength=F).astype(np.float64)

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
        touch = active[pj] | active[pp]  # entries between two finished jobs are frozen
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
        qj = pos[pj]  # compact index of each entry's job (-1: not updated)
        sp0, sp_var0 = self._pair_prior_means(upd)[3:5]
        m, P = self.m, self.P
        res2 = fit.PAIR_RESIDUAL_SD**2
        noise_e = tau2 / pc
        # alone rates, from alone runs and (the pair terms taken as known) paired ones
        prec, num = self.cnt[upd] / tau2, self.s1[upd] / tau2
        mine = qj >= 0
        if mine.any():
            off, off_v = self._pair_offset(pj, pp, pt)
            z = ybar - off
            w = 1.0 / (res2 + noise_e + off_v)
            flat = qj[mine] * T + pt[mine]
            prec += np.bincount(flat, weights=w[mine], minlength=k * T).reshape(k, T)
            num += np.bincount(flat, weights=(w * z)[mine], minlength=k * T).reshape(k, T)
        prior_mu, prior_sig = self._priors(upd)
        m_u, P_u = fit.gaussian_posterior(prior_mu, np.linalg.inv(prior_sig), prec, num)
        m_u = fit.clamp_shape(m_u, self.shape[upd], math.log(self.config.ratio_bound))
        m[upd], P[upd] = m_u, P_u
        self.fitted[upd] = True
        if e.size:
            self._fit_pairs(upd, pj, pp, pt, ybar - m[pj, pt], noise_e + P[pj, pt, pt], stalled)
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
            sel = fam >= 0
            f, ws = fam[sel], w[sel]
            ms = meas[sel]
            for name, values in (("_fam_a", self.a_m[ms]), ("_fam_b", self.b_m[ms]), ("_fam_sp", self.sp_m[ms])):
                setattr(self, name, np.bincount(f, weights=ws * values, minlength=F))
            self._fam_n = np.bincount(f, weights=ws, minlength=F)
            # per-type sharing terms: over the members measured on each type (the others carry only the prior)
            T = self.T
            e = np.flatnonzero(self.palive)
            self._ta_w[:] = 0.0
            self._tb_w[:] = 0.0
            self._ta_w[self.pj[e], self.pt[e]] = 1.0
            self._tb_w[self.pp[e], self.pt[e]] = 1.0
            flat = (f[:, None] * T + np.arange(T)).ravel()
            for tot, cnt, values, seen in (("_fam_ta", "_fam_tna", self.ta_m[ms], self._ta_w[ms]),
                                           ("_fam_tb", "_fam_tnb", self.tb_m[ms], self._tb_w[ms])):
                wt = (ws[:, None] * seen).ravel()
                setattr(self, tot, np.bincount(flat, weights=wt * values.ravel(), minlength=F * T).reshape(F, T))
                setattr(self, cnt, np.bincount(flat, weights=wt, minlength=F * T).reshape(F, T))
