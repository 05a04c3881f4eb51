"""How :class:`~tesserae.profiles.learned.RateEstimator` learns pairs: the factor a job keeps next to a
partner, per GPU type, and the veto of pairs measured slower than alone. A mixin of the estimator, one
purpose per file; it works on the estimator's arrays.

The model, in log space: next to partner p on GPU type t, job j runs at its alone rate there plus

    mu + mu_t + (a_j + a_jt) + (b_p + b_pt) + e_jpt

- ``mu`` the population's mean pair factor and ``mu_t`` its GPU type's departure from it;
- ``a_j`` how much j suffers from sharing on every type (the cross-type factor), ``a_jt`` how much
  more or less it suffers on type t; ``b_p``, ``b_pt`` the same for the pressure p puts on others;
- ``e_jpt`` what is particular to the pair: ``e_jp`` common to its GPU types plus a per-type part.

Each per-type term is fitted from the pair measurements on its own type, with the cross-type term as its
prior (it starts equal to it, and moves as far as the measurements on that type outweigh the prior's
spread ``TYPE_PAIR_SD``); a job of a family (declared type and GPU count) takes, as the prior of its
per-type terms, the other members' (leave-one-out, shrunk to 0 by ``KAPPA_FAMILY``) over the members
measured on that type: jobs of one model share GPUs alike, type by type. A pair never measured on a
type gets the sum of the terms; one measured on other types also gets its own residual there, shrunk
(``pair_log_factor``). On Gavel's table (26 single-GPU job types, 3 GPU types) the per-type terms take
the explained share of the log pair factors' variance from 53% (one factor per job and partner on every
type) to 63%; the residual left is pair-specific and only weakly shared across GPU types (correlation
0.01-0.37 between types), hence the residual's small cross-type share.

The scheduler sees the per-type sums (``presented``: ``a`` and ``b`` per GPU type); the pair's own residual
reaches it only through the vetoes (``_veto``).
"""

from __future__ import annotations

import math

import numpy as np

from tesserae.profiles import _learned_fit as fit
from tesserae.profiles.learned_config import MAX_TAGS

#: Prior sd of a job's per-type sharing terms around its cross-type ones, and of a GPU type's mean pair
#: factor around the population's.
TYPE_PAIR_SD = 0.25
TYPE_MEAN_SD = 0.3
#: Sd of what the job terms cannot explain about one pair on one type, as the per-type terms and the latent
#: vectors are fitted: on Gavel's table most of a pair factor's departure from the additive terms is particular
#: to the pair (sd 0.56 left by per-type additive terms), so one pair moves a job's per-type terms only so far.
TYPE_RESIDUAL_SD = 0.4
#: How many of its sds a per-type term is moved toward 0 before the scheduler sees it (``shown_per_type``).
SHOWN_SDS = 0.0
LCB_SDS = 0.0
#: Of the pair residual's variance (``PAIR_RESIDUAL_SD``), the share common to the pair's GPU types.
CROSS_RESIDUAL_SHARE = 0.25
#: Prior sd of each coordinate of a family's latent sharing vectors (``pair_rank`` > 0), their start (a
#: fixed small pattern: alternating least squares needs one away from 0), and the largest residual (log)
#: one pair entry contributes to their fit (an out-of-memory stall is far below anything else).
LATENT_SD, LATENT_START, LATENT_CLIP = 0.5, 0.05, 2.0


def latent_start(n: int, t: int, r: int, offset: int = 0) -> np.ndarray:
    """The latent vectors' start for families offset..offset+n-1: a fixed pattern, the same on every machine."""
    f = np.arange(offset, offset + n)[:, None, None]
    u = np.arange(t)[None, :, None]
    k = np.arange(r)[None, None, :]
    return LATENT_START * np.cos(1.0 + 2.3 * f + 0.7 * u + 1.9 * k)


class Pairs:
    """The estimator's pair terms and vetoes (see module docstring)."""

    def _pair_prior_means(self, slots: np.ndarray) -> tuple[np.ndarray, ...]:
        """Priors of a, b and the spread factor for each slot: (a mean, b mean, their variance, spread mean,
        its variance, per-type a mean, per-type b mean, their variances (S, T) each). Without a family: 0
        (the built-in spread) and the population's sd. With one: the other members' mean (leave-one-out,
        shrunk to the population) and a variance that narrows, as members are measured, to the sd within a
        family (jobs of one type share GPUs alike); per type, over the members measured on that type."""
        n, T = slots.size, self.T
        a, b, sp = np.zeros(n), np.zeros(n), self.sp_prior[slots].copy()
        var = np.full(n, fit.PAIR_SD**2)
        sp_var = np.full(n, fit.SPREAD_SD**2)
        ta, tb = np.zeros((n, T)), np.zeros((n, T))
        ta_var, tb_var = np.full((n, T), TYPE_PAIR_SD**2), np.full((n, T), TYPE_PAIR_SD**2)
        fam = self.fam[slots]
        has = fam >= 0
        if has.any():
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
            for mean, v, tot, cnt, own, seen in ((ta, ta_var, self._fam_ta, self._fam_tna, self.ta_m, self._ta_w),
                                                  (tb, tb_var, self._fam_tb, self._fam_tnb, self.tb_m, self._tb_w)):
                wt = seen[sl]
                d = fit.KAPPA_FAMILY + cnt[f] - wt
                mean[has] = (tot[f] - wt * own[sl]) / d
                v[has] = fit.WITHIN_FAMILY_SD**2 + TYPE_PAIR_SD**2 * fit.KAPPA_FAMILY / d
        return a, b, var, sp, sp_var, ta, tb, ta_var, tb_var

    def _pair_offset(self, pj: np.ndarray, pp: np.ndarray, pt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The modelled log pair factor of entries (job, partner, type) and its variance (the pair residual
        not included)."""
        mean = (self.pair_mu + self.pair_dmu[pt] + self.a_m[pj] + self.ta_m[pj, pt] + self.b_m[pp]
                + self.tb_m[pp, pt] + self._latent(pj, pp, pt))
        var = (self.pair_var + self.pair_dmu_v[pt] + self.a_v[pj] + self.ta_v[pj, pt] + self.b_v[pp]
               + self.tb_v[pp, pt])
        return mean, var

    def shown_per_type(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The per-type terms the scheduler sees: each moved toward the cross-type factor by ``SHOWN_SDS`` of
        its sd (a departure the measurements do not establish is not shown)."""
        z = SHOWN_SDS

        def shrink(m: np.ndarray, v: np.ndarray) -> np.ndarray:
            return np.sign(m) * np.maximum(np.abs(m) - z * np.sqrt(v), 0.0) if z > 0 else m

        ta, tb = shrink(self.ta_m[slots], self.ta_v[slots]), shrink(self.tb_m[slots], self.tb_v[slots])
        if LCB_SDS > 0:
            ta = ta - LCB_SDS * np.sqrt(self.a_v[slots][:, None] + self.ta_v[slots])
            tb = tb - LCB_SDS * np.sqrt(self.b_v[slots][:, None] + self.tb_v[slots])
        return ta, tb, shrink(self.pair_dmu, self.pair_dmu_v)

    def _latent(self, pj: np.ndarray, pp: np.ndarray, pt: np.ndarray) -> np.ndarray:
        """The families' latent part of entries' log factors: u(job's family, type) . v(partner's family, type)
        (0 where either job has no family or ``pair_rank`` is 0)."""
        out = np.zeros(np.shape(pj))
        if self._fam_u.shape[2] == 0 or self._fam_u.shape[0] == 0:
            return out
        fj, fp = self.fam[pj], self.fam[pp]
        ok = (fj >= 0) & (fp >= 0)
        if np.any(ok):
            out[ok] = (self._fam_u[fj[ok], pt[ok]] * self._fam_v[fp[ok], pt[ok]]).sum(axis=-1)
        return out

    def _fit_latent(self, pj: np.ndarray, pp: np.ndarray, pt: np.ndarray, resid: np.ndarray, w: np.ndarray) -> None:
        """One alternating least-squares step of the families' latent vectors on what the other terms leave
        of the entries' log factors (matrix completion over families, type by type, as Gavel's estimator does
        over its reference jobs): cells (job's family, partner's family, type) weigh their entries, each
        family's u on a type is refitted against its partners' v there, then the v against the new u."""
        F, T, r = self._fam_u.shape
        fj, fp = self.fam[pj], self.fam[pp]
        ok = (fj >= 0) & (fp >= 0)
        if r == 0 or F == 0 or not ok.any():
            return
        fj, fp, t = fj[ok], fp[ok], pt[ok]
        cell = (fj * F + fp) * T + t
        cells, where = np.unique(cell, return_inverse=True)
        W = np.bincount(where, weights=w[ok])
        R = np.bincount(where, weights=w[ok] * np.clip(resid[ok], -LATENT_CLIP, LATENT_CLIP)) / W
        cj, cp, ct = cells // T // F, cells // T % F, cells % T
        lam = np.eye(r) / LATENT_SD**2
        for mine, theirs, own, other in ((cj, cp, self._fam_u, self._fam_v), (cp, cj, self._fam_v, self._fam_u)):
            x = other[theirs, ct]  # (cells, r)
            at = mine * T + ct
            A = np.tile(lam, (F * T, 1, 1))
            np.add.at(A, at, W[:, None, None] * x[:, :, None] * x[:, None, :])
            b = np.zeros((F * T, r))
            np.add.at(b, at, (W * R)[:, None] * x)
            own[:] = np.linalg.solve(A, b[:, :, None])[:, :, 0].reshape(F, T, r)

    def _fit_pairs(self, upd: np.ndarray, pj: np.ndarray, pp: np.ndarray, pt: np.ndarray, base: np.ndarray,
                   noise: np.ndarray, stalled: np.ndarray) -> None:
        """One Gauss-Seidel sweep over the pair terms, given the entries' observed log factors ``base``
        (their rate over the job's alone estimate) and their variance ``noise`` (observation and alone
        estimate): the population's mean, the per-type means, then each job's cross-type and per-type
        sensitivity, then each partner's pressure (see module docstring)."""
        T, k = self.T, upd.size
        observed = base
        base = base - self._latent(pj, pp, pt)  # the additive terms fit what the families' latent part leaves
        pos = np.full(self._cap, -1, dtype=np.int64)
        pos[upd] = np.arange(k)
        qj, qp = pos[pj], pos[pp]
        mine, theirs = qj >= 0, qp >= 0
        a0, b0, ab_var, _, _, ta0, tb0, ta_var, tb_var = self._pair_prior_means(upd)
        a_m, a_v, b_m, b_v = self.a_m, self.a_v, self.b_m, self.b_v
        ta_m, ta_v, tb_m, tb_v = self.ta_m, self.ta_v, self.tb_m, self.tb_v
        res2 = fit.PAIR_RESIDUAL_SD**2
        lim = math.log(1.0 / self.config.pair_floor)
        A = a_m[pj] + ta_m[pj, pt]
        B = b_m[pp] + tb_m[pp, pt]
        Av, Bv = a_v[pj] + ta_v[pj, pt], b_v[pp] + tb_v[pp, pt]
        # the population's mean pair factor, then each GPU type's (a stall, out of memory, says nothing there)
        dmu = self.pair_dmu[pt]
        w = np.where(stalled, 0.0, 1.0 / (res2 + noise + Av + Bv + self.pair_dmu_v[pt]))
        pm, pv = fit.scalar_posterior(np.array([self.pair_mu0]), fit.PAIR_MEAN_SD**2, np.array([w.sum()]),
                                      np.array([(w * (base - A - B - dmu)).sum()]))
        self.pair_mu, self.pair_var = pair_mu, pair_var = float(np.clip(pm[0], -lim, 0.0)), float(pv[0])
        # The per-type terms are fitted with the other terms at their means (their spread is in the priors, not
        # added to the noise as for the cross-type ones): a type's own measurements must be able to outweigh
        # the cross-type factor, or a pair fast on one type and harmful on another would average out.
        w = np.where(stalled, 0.0, 1.0 / (TYPE_RESIDUAL_SD**2 + noise))
        dm, dv = fit.scalar_posterior(np.zeros(T), TYPE_MEAN_SD**2, np.bincount(pt, weights=w, minlength=T),
                                      np.bincount(pt, weights=w * (base - pair_mu - A - B), minlength=T))
        self.pair_dmu, self.pair_dmu_v = np.clip(dm, -lim, lim), dv
        mean = pair_mu + self.pair_dmu[pt]
        mean_v = pair_var + self.pair_dmu_v[pt]
        # each job's sensitivity: across types, then per type (the cross-type one its prior); then the pressure
        def side(q: np.ndarray, sel: np.ndarray, idx: np.ndarray, m: np.ndarray, v: np.ndarray, m0: np.ndarray,
                 t_m: np.ndarray, t_v: np.ndarray, t0: np.ndarray, t_var: np.ndarray, o: np.ndarray,
                 ov: np.ndarray) -> None:
            w = 1.0 / (res2 + noise + ov + mean_v + t_v[idx, pt])
            prec = np.bincount(q[sel], weights=w[sel], minlength=k)
            num = np.bincount(q[sel], weights=(w * (base - mean - o - t_m[idx, pt]))[sel], minlength=k)
            mm, vv = fit.scalar_posterior(m0, ab_var, prec, num)
            m[upd], v[upd] = np.clip(mm, -lim, lim), vv
            w = 1.0 / (TYPE_RESIDUAL_SD**2 + noise)
            flat = q[sel] * T + pt[sel]
            prec = np.bincount(flat, weights=w[sel], minlength=k * T).reshape(k, T)
            num = np.bincount(flat, weights=(w * (base - mean - o - m[idx]))[sel], minlength=k * T).reshape(k, T)
            tm, tv = fit.scalar_posterior(t0, t_var, prec, num)
            t_m[upd], t_v[upd] = np.clip(tm, -lim, lim), tv

        side(qj, mine, pj, a_m, a_v, a0, ta_m, ta_v, ta0, ta_var, B, Bv)
        A, Av = a_m[pj] + ta_m[pj, pt], a_v[pj] + ta_v[pj, pt]
        side(qp, theirs, pp, b_m, b_v, b0, tb_m, tb_v, tb0, tb_var, A, Av)
        B = b_m[pp] + tb_m[pp, pt]
        self._fit_latent(pj, pp, pt, observed - mean - A - B, 1.0 / (TYPE_RESIDUAL_SD**2 + noise))

    def pair_log_factor(self, s: int, p: int, t: int) -> tuple[float, float, bool]:
        """Log factor of slot ``s`` next to slot ``p`` on type ``t``: (mean, variance, measured on t). The
        model's terms, plus the pair's own residual: from its measurements on t, with its measurements on
        the other types as the prior (shrunk by their counts and the residual's cross-type share)."""
        T = self.T
        res2 = fit.PAIR_RESIDUAL_SD**2
        seen = [(u, e) for u in range(T) if (e := self._pair_of.get((s, p, u))) is not None]
        types = np.array([t] + [u for u, _ in seen if u != t])
        mean, var = self._pair_offset(np.full(types.size, s), np.full(types.size, p), types)
        if not seen:
            return float(mean[0]), float(var[0]) + res2, False
        # the log factor z_u = terms + residual on each type u: the terms independent across types, the
        # residual with a share common to them; observed as the pair's mean log-rate minus the alone one
        cross = CROSS_RESIDUAL_SHARE * res2
        cov = np.full((types.size, types.size), cross) + np.diag(var + res2 - cross)
        obs = np.array([u in dict(seen) for u in types.tolist()])
        ents = np.array([dict(seen)[u] for u in types[obs].tolist()])
        sel = types[obs]
        r = self.ps1[ents] / self.pc[ents] - self.m[s, sel] - mean[obs]
        noise = self.tau2 / self.pc[ents] + self.P[s, sel, sel]
        c_oo = cov[np.ix_(obs, obs)] + np.diag(noise)
        c_to = cov[0, obs]
        gain = np.linalg.solve(c_oo, c_to)
        return float(mean[0] + gain @ r), max(float(cov[0, 0] - gain @ c_to), 1e-12), bool(obs[0])

    def _veto(self, e: np.ndarray, pj: np.ndarray, pp: np.ndarray, pt: np.ndarray, ybar: np.ndarray,
              stalled: np.ndarray) -> None:
        """Gandiva's introspection: a pair measured in both directions slower than its two jobs alone on a
        GPU type (factors summing below 1, against the jobs' alone rates there; a stall counts as 0) is
        vetoed there: both jobs carry a tag naming the pair and the type, and two jobs with a common tag are
        shown as unable to share GPUs of its type (:mod:`learned_classes`)."""
        if e.size == 0:
            return
        T, cap = self.T, self._cap
        alone = self.m[pj, pt].copy()
        # A job never measured alone on the pair's type (a newcomer paired on arrival, or moved there in a
        # pair): its posterior there is fitted from the pair's own figures, so the pair would look as good
        # as its rate, and it would never be judged. Its reference is the estimate from its alone runs on
        # the other types (the prior's shape carries them over) and its prior, without the pair data.
        here = self.cnt[pj, pt] > 0
        if not here.all():
            need = np.unique(pj[~here])
            mu, sig = self._priors(need)
            m_alone, _ = fit.gaussian_posterior(mu, np.linalg.inv(sig), self.cnt[need] / self.tau2,
                                                self.s1[need] / self.tau2)
            m_alone = fit.clamp_shape(m_alone, self.shape[need], math.log(self.config.ratio_bound))
            alone[~here] = m_alone[np.searchsorted(need, pj[~here]), pt[~here]]
        factor = np.where(stalled, 0.0, np.exp(np.minimum(ybar - alone, 0.0)))
        key = (pj * cap + pp) * T + pt
        back = (pp * cap + pj) * T + pt
        order = np.argsort(key, kind="stable")
        at = np.clip(np.searchsorted(key[order], back), 0, key.size - 1)
        other = order[at]
        # Judged where both jobs were measured alone on some GPU type (a job measured only in pairs is shown
        # as unable to share until it is: ``presented``); else a factor says little.
        has_alone = (self.cnt[pj] > 0).any(axis=1) & (self.cnt[pp] > 0).any(axis=1)
        mutual = (key[other] == back) & (pj < pp) & has_alone
        bad = mutual & (factor + factor[other] < 1.0)
        for s, p, t in zip(pj[bad].tolist(), pp[bad].tolist(), pt[bad].tolist(), strict=True):
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
