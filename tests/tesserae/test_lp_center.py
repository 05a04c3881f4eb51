"""The central point of a max-min LP (``scheduling/_lp_center.py``): the right point, found without
BLAS, whatever the blocking."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq, linprog
from scipy.sparse import csr_matrix

from tesserae.scheduling._lp_center import central_max_min


def maxmin_lp(rates: np.ndarray, k: np.ndarray, cap: np.ndarray) -> tuple[csr_matrix, np.ndarray]:
    """Rows as gavel-maxmin builds them: z <= sum_t rate x (per job), time <= 1, GPUs of t <= cap_t."""
    m, T = rates.shape
    n = m * T
    G = np.zeros((2 * m + T, n + 1))
    for j in range(m):
        G[j, j * T:(j + 1) * T] = -rates[j]
        G[j, n] = 1.0
        G[m + j, j * T:(j + 1) * T] = 1.0
        for t in range(T):
            G[2 * m + t, j * T + t] = k[j]
    return csr_matrix(G), np.concatenate([np.zeros(m), np.ones(m), cap])


def test_centre_of_a_non_unique_optimum() -> None:
    # One job, two types of capacity 1 and 0.5, rate 1 on both: z* = 1 on the face x1 + x2 = 1,
    # x2 <= 0.5. Its analytic centre maximises log x1 + log x2 + log(1 - x1) + log(0.5 - x2) there.
    G, h = maxmin_lp(np.array([[1.0, 1.0]]), np.array([1.0]), np.array([1.0, 0.5]))
    x, z = central_max_min(G, h, border=2)
    x2 = brentq(lambda y: -1 / (1 - y) + 2 / y - 1 / (0.5 - y), 1e-9, 0.5 - 1e-9)
    assert z == pytest.approx(1.0, abs=1e-7)
    assert x == pytest.approx([1 - x2, x2], abs=1e-6)


def test_symmetric_jobs_get_the_same_share() -> None:
    G, h = maxmin_lp(np.ones((3, 1)), np.ones(3), np.array([2.0]))
    x, z = central_max_min(G, h, border=1)
    assert z == pytest.approx(2 / 3, rel=1e-7)
    assert x == pytest.approx([2 / 3] * 3, rel=1e-6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 7), st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_optimal_feasible_and_the_same_point_with_any_blocking(m: int, T: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    rates = rng.choice([0.0, 0.5, 1.0, 2.0, 3.0], size=(m, T))
    rates[:, 0] = np.maximum(rates[:, 0], 0.5)  # every job runs somewhere
    k = rng.choice([1.0, 2.0], size=m)
    cap = rng.choice([1.0, 2.0, 4.0], size=T)
    G, h = maxmin_lp(rates, k, cap)
    n = G.shape[1] - 1
    best = linprog(np.r_[np.zeros(n), -1.0], A_ub=G, b_ub=h, bounds=[(0, None)] * n + [(None, None)],
                   method="highs")
    x, z = central_max_min(G, h, border=T)
    assert z == pytest.approx(-best.fun, rel=2e-6, abs=1e-9)
    assert (x > 0).all() and (G @ np.append(x, z) <= h + 1e-9).all()
    # The blocks only change the elimination order, not the point, up to how far the centring got:
    # near the optimum the Newton system's factorisation gives out at a t that depends on the order
    # (m=3, T=3, seed=909: 7.2e-5 apart between border 1 and 3). A run always uses one border.
    for border in (0, 1, G.shape[0]):
        xb, zb = central_max_min(G, h, border=min(border, G.shape[0]))
        assert zb == pytest.approx(z, rel=2e-6)
        assert xb == pytest.approx(x, abs=5e-4)


def test_no_blas_on_the_way(monkeypatch: pytest.MonkeyPatch) -> None:
    # The point must not depend on the CPU's BLAS kernels: the solver may not reach them at all.
    import scipy.linalg

    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("BLAS/LAPACK called")

    for name in ("cho_factor", "cho_solve", "solve", "cholesky"):
        monkeypatch.setattr(scipy.linalg, name, refuse)
    monkeypatch.setattr(np, "dot", refuse)
    monkeypatch.setattr(np.linalg, "cholesky", refuse)
    monkeypatch.setattr(np.linalg, "solve", refuse)
    G, h = maxmin_lp(np.array([[1.0, 2.0], [2.0, 1.0]]), np.ones(2), np.array([1.0, 1.0]))
    central_max_min(G, h, border=2)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([2, 3]), st.integers(1, 6), st.integers(0, 2**31 - 1), st.booleans())
def test_small_blocks_written_out_give_the_same_bits(s: int, K: int, seed: int, definite: bool) -> None:
    # The 2 x 2 and 3 x 3 factorisations (every job's block and the 3-type border of Gavel's plain
    # LP) are the general loop written out: the same values bit for bit, or the same refusal.
    from tesserae.scheduling._lp_center import _inverse_cholesky, _inverse_cholesky_any

    rng = np.random.default_rng(seed)
    b = rng.normal(size=(K, s, s)) * 10.0 ** rng.integers(-6, 6, size=(K, 1, 1))
    a = np.einsum("kij,klj->kil", b, b) + (1e-9 if definite else -1.0) * np.eye(s)
    try:
        want = _inverse_cholesky_any(a)
    except np.linalg.LinAlgError:
        with pytest.raises(np.linalg.LinAlgError):
            _inverse_cholesky(a)
        return
    got = _inverse_cholesky(a)
    assert got.shape == want.shape
    assert np.array_equal(got.view(np.uint64), want.view(np.uint64))  # bits, signed zeros included
