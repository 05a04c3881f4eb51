"""The arithmetic of :mod:`tesserae.profiles.learned`: one refresh of every posterior, in NumPy.

The model, in log space (rates in iterations/s):

- a job's consolidated alone log-rates on the T GPU types, ``x_j``, are Gaussian around a prior
  ``N(mu, Sigma)``: the job's profile entry when a measured profile has its declared type, else
  its family's (jobs of one declared type and GPU count) or the population's, both fitted from the
  measured jobs (an EM step of a Gaussian with missing entries: the "low-rank" structure across
  jobs lives in ``Sigma``, whose large common component is the job's unknown scale and whose
  shape part says how a speed-up on one type predicts another);
- next to a partner p a job runs at ``x_j + mu_pair + a_j + b_p + e_jp``: ``a_j`` how much the job
  suffers from sharing, ``b_p`` how much the partner presses on others, ``e_jp`` a pair residual;
- spread over more nodes than it needs, a job runs at ``x_j + s_j`` (s <= 0).

Each refresh runs two Gauss-Seidel sweeps over these blocks (warm-started from the last refresh),
then refits the population and family priors. Every function here takes and returns arrays; the
estimator owns the state.
"""

from __future__ import annotations

import numpy as np

#: Log-space standard deviation of a job's unknown scale (iterations are the job's own unit).
SCALE_SD = 3.0
#: ... of a job's speed on one GPU type relative to its scale, before anything is measured.
SHAPE_SD = 0.5
#: ... of a measured profile's entry for the declared type (the job may differ from the profiled one).
PROFILE_SD = 0.15
#: Prior sd of a job's sharing sensitivity a and pressure b, and of the population's mean pair factor.
PAIR_SD = 0.3
PAIR_MEAN_SD = 0.5
#: Sd of what the additive pair model cannot explain about one pair.
PAIR_RESIDUAL_SD = 0.15
#: Prior sd of a job's spread factor (log).
SPREAD_SD = 0.5
#: Sd of a job's pair terms and spread factor around its family's (jobs of one declared type and GPU count).
WITHIN_FAMILY_SD = 0.1
#: A job's log-rates around its family's mean: a common scale (batch size, input pipeline) and a little
#: per-type shape.
WITHIN_SCALE_SD, WITHIN_SHAPE_SD = 0.5, 0.15
#: Pseudo-counts of the priors in the population and family fits (how many jobs' worth they weigh).
KAPPA_POP, KAPPA_FAMILY = 4.0, 1.0
#: A measured job whose posterior mean lies further than this many sds from the population's
#: weighs proportionally less in the population fit (bounded influence of any one job).
INFLUENCE_SDS = 3.0


def inv(a: np.ndarray) -> np.ndarray:
    """Inverse of a stack of matrices (..., T, T). With one GPU type they are 1x1 and the inverse is 1/x:
    exactly what LAPACK returns for them (LU of one entry, then a division), without its per-matrix calls,
    which cost most of a refresh on a one-type cluster of 16,384 GPUs."""
    if a.shape[-1] == 1:
        return 1.0 / a
    return np.linalg.inv(a)


def subset(mask: np.ndarray) -> slice | np.ndarray:
    """The rows a mask selects, as an index for reading and writing: all of them (a slice, no copy: with family
    hints every job has a family) or their positions (cheaper than a boolean mask when used more than once)."""
    return slice(None) if mask.all() else np.flatnonzero(mask)


def inv_sum(first: np.ndarray, *terms: np.ndarray | float) -> np.ndarray:
    """``1 / (first + terms[0] + ...)`` added left to right, in one new array: the refit's temporaries are the
    size of all pair entries, and fresh memory costs page faults (1,500-2,000 a refit at 16,384 GPUs)."""
    out = np.add(first, terms[0])
    for t in terms[1:]:
        np.add(out, t, out=out)
    return np.divide(1.0, out, out=out)


def diff(first: np.ndarray, *terms: np.ndarray | float) -> np.ndarray:
    """``first - terms[0] - ...`` left to right, in one new array (see ``inv_sum``)."""
    out = np.subtract(first, terms[0])
    for t in terms[1:]:
        np.subtract(out, t, out=out)
    return out


def matvec(a: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``einsum("sij,sj->si", a, v)``: each row's matrix times its vector (with 1x1 matrices, a product)."""
    if a.shape[-1] == 1:
        return a[:, :, 0] * v
    return np.einsum("sij,sj->si", a, v)


def prior_covariance(t: int, scale_sd: float = SCALE_SD, shape_sd: float = SHAPE_SD) -> np.ndarray:
    """``scale^2 11' + shape^2 I``: an unknown common scale plus independent per-type shapes."""
    return np.full((t, t), scale_sd**2) + np.eye(t) * shape_sd**2


def pooled_noise(ss: float, dof: float, prior_sd: float, prior_weight: float = 20.0) -> float:
    """Observation noise variance (log) from the pooled within-entry sum of squares, shrunk to ``prior_sd``."""
    var = (prior_weight * prior_sd**2 + max(ss, 0.0)) / (prior_weight + max(dof, 0.0))
    return float(np.clip(var, 0.005**2, 0.5**2))


def gaussian_posterior(mu: np.ndarray, sigma_inv: np.ndarray, prec: np.ndarray, num: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Posterior (mean, covariance) of x ~ N(mu, Sigma) observed with diagonal precisions ``prec``
    and precision-weighted sums ``num`` (rows are jobs: mu (S,T), sigma_inv (S,T,T))."""
    if mu.shape[1] == 1:  # one GPU type: scalars
        lam1 = sigma_inv[:, 0, 0] + prec[:, 0]
        mean1 = (sigma_inv[:, 0, 0] * mu[:, 0] + num[:, 0]) / lam1
        return mean1[:, None], (1.0 / lam1)[:, None, None]
    lam = sigma_inv.copy()
    idx = np.arange(mu.shape[1])
    lam[:, idx, idx] += prec
    cov = inv(lam)
    rhs = matvec(sigma_inv, mu) + num
    return matvec(cov, rhs), cov


def member_information(prec: np.ndarray, ybar: np.ndarray, within: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What one member's observations say about its family's mean: the information matrix and vector of
    y_j ~ N(mu_family, within + diag(1 / prec)) on its observed types (precision 0: not observed), by
    Woodbury, D - D (within^-1 + D)^-1 D, so unobserved types carry nothing."""
    if prec.shape[1] == 1:  # the same arithmetic on scalars
        d = prec[:, :, None]
        info = d - d * (1.0 / (1.0 / within[None] + d)) * d
        return info, info[:, :, 0] * ybar
    return member_information_matrix(prec, ybar, within)


def member_information_matrix(prec: np.ndarray, ybar: np.ndarray, within: np.ndarray
                              ) -> tuple[np.ndarray, np.ndarray]:
    """``member_information`` in matrices, whatever the number of GPU types (the one-type case's reference)."""
    n, t = prec.shape
    D = np.zeros((n, t, t))
    idx = np.arange(t)
    D[:, idx, idx] = prec
    inner = inv(inv(within)[None] + D)
    info = D - D @ inner @ D
    return info, matvec(info, ybar)


def family_fit(groups: np.ndarray, n_groups: int, info: np.ndarray, infoy: np.ndarray, prior_mu: np.ndarray,
               prior_sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each family's mean from its members' information (the population as its prior): (precision
    (G,T,T), precision-weighted mean (G,T)); members are rows with group >= 0."""
    t = prior_mu.size
    p_inv = np.linalg.inv(prior_sigma)
    lam = np.tile(p_inv, (n_groups, 1, 1))
    eta = np.tile(p_inv @ prior_mu, (n_groups, 1))
    sel = groups >= 0
    if n_groups and sel.any():
        sel = subset(sel)
        g = groups[sel]
        flat = (g[:, None] * t * t + np.arange(t * t)).ravel()
        lam += np.bincount(flat, weights=info[sel].ravel(), minlength=n_groups * t * t).reshape(n_groups, t, t)
        flat = (g[:, None] * t + np.arange(t)).ravel()
        eta += np.bincount(flat, weights=infoy[sel].ravel(), minlength=n_groups * t).reshape(n_groups, t)
    return lam, eta


def scalar_posterior(prior_mean: np.ndarray, prior_var: float | np.ndarray, prec: np.ndarray, num: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Conjugate update of independent scalars: (mean, variance)."""
    p = 1.0 / prior_var + prec
    return (prior_mean / prior_var + num) / p, 1.0 / p


def weighted_fit(means: np.ndarray, covs: np.ndarray, weights: np.ndarray, prior_mu: np.ndarray,
                 prior_sigma: np.ndarray, kappa: float, nu: float) -> tuple[np.ndarray, np.ndarray]:
    """(mu, Sigma) of the jobs' posteriors (an EM M-step) around a conjugate prior of weight kappa / nu."""
    w = weights[:, None]
    total = float(weights.sum())
    mu = (kappa * prior_mu + (w * means).sum(axis=0)) / (kappa + total)
    dev = means - mu
    scatter = np.einsum("s,si,sj->ij", weights, dev, dev) + np.einsum("s,sij->ij", weights, covs)
    sigma = (nu * prior_sigma + scatter) / (nu + total)
    return mu, sigma


def influence_weights(means: np.ndarray, mu: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """Weight 1 for a job within INFLUENCE_SDS (Mahalanobis) of the population, less beyond, so
    that no job (a hostile one lying within bounds) moves the shared priors by more than a bounded
    amount."""
    if means.shape[0] == 0:
        return np.zeros(0)
    dev = means - mu
    # One GPU type: LAPACK's solve multiplies by the pivot's reciprocal; the same here, without the call.
    sol = dev * (1.0 / sigma[0, 0]) if mu.size == 1 else np.linalg.solve(sigma, dev.T).T
    dist = np.sqrt(np.maximum((dev * sol).sum(axis=1), 0.0))
    return np.minimum(1.0, INFLUENCE_SDS / np.maximum(dist, 1e-12))


def clamp_shape(x: np.ndarray, shape_prior: np.ndarray, bound: float) -> np.ndarray:
    """Each job's log-rates kept within ``bound`` (log) of its prior shape around its own offset: a job
    can look at most e^(2 bound) times more or less sped up between two types than its prior says."""
    if x.shape[1] < 2:
        return x
    offset = (x - shape_prior).mean(axis=1, keepdims=True)
    return np.clip(x, offset + shape_prior - bound, offset + shape_prior + bound)
