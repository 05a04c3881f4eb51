"""The central solution of a max-min LP: the analytic centre of its optimal face, by a barrier method.

Gavel solves its max-min LP with ECOS, an interior-point solver, and uses the point it returns. When
the optimum is not unique (it rarely is: the max-min optimum fixes only the bottleneck jobs), that
point is the limit of the central path, the analytic centre of the optimal face, not a vertex as a
simplex solver returns. Which jobs get which GPU type follows from that choice, so a baseline that
claims to behave like Gavel must pick the same point. SciPy's interior-point HiGHS stops short of
that limit (it crosses over to a vertex, or ends off-centre without crossover), so this module
follows the central path itself:

    maximize  z  s.t.  G [x; z] <= h,  x >= 0

by a primal barrier method (minimise -t z - sum log(h - G v) - sum log x for growing t). Each Newton
step solves a system in the rows of G only (two per job and one per GPU type, against many columns),
with the Woodbury identity. The analytic centre does not depend on how rows or columns are scaled,
so the point agrees with any interior-point solver run to convergence on the same inequalities.

**The same point on every machine, bit for bit.** The point decides who runs (Gavel's priorities
divide by it, and variables that are zero on the optimal face come out as tiny positives whose
order matters), so it must not depend on the CPU. BLAS and LAPACK kernels are chosen per CPU (and
per thread count) and sum in different orders; NumPy's ``log``/``exp`` differ in the last bit by
SIMD level. So this module uses none of them: only IEEE-754 elementwise operations (``+ - * /``,
``sqrt``: correctly rounded everywhere), accumulations in a fixed order (``np.bincount``, NumPy's
pairwise ``add.reduce``) and integer work. The Newton system is factored by its own Cholesky,
which exploits the LP's structure: without the last ``border`` rows (the GPU-type capacity rows,
which couple every job), the rows fall apart into independent blocks (one per job; jobs joined by
a pair variable share a block), factored together, size by size, with the border by a Schur
complement. The line search needs no logarithm either: it follows the sign of the barrier's
derivative along the Newton direction (exact line search by safeguarded Newton steps).

**Weights.** ``row_weight`` and ``col_weight`` weight each row's and each column's log term. A
problem that has many identical copies of a row or a column (jobs of one class in Gavel's LP, all
the pairs of two classes) has a symmetric centre, so it can be solved with one row or column per
class, each weighted by its number of copies: the weighted barrier on the small problem is the
barrier of the large one restricted to its symmetric points, and its path is the large path
(``gavel_classes``). Without weights every weight is 1, which changes no operation's result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from scipy.sparse import csr_matrix

#: Relative duality gap at which the path is left: the point is then this close to the centre.
GAP = 1e-9
_GROWTH = 8.0
_MAX_NEWTON = 60
_MAX_LINE = 40
#: The line search stops once the slope is this fraction of the Newton step's initial slope.
_LINE_SLOPE = 0.1


def central_max_min(G: csr_matrix, h: np.ndarray, border: int = 0, row_weight: np.ndarray | None = None,
                    col_weight: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """(x, z) near the analytic centre of the optimal face of max z s.t. G [x; z] <= h, x >= 0.

    The last column of ``G`` is z; the start ``x`` = small equal values must be strictly feasible
    for every row whose z coefficient is 0 (true of capacity and time rows with positive bounds).
    ``border``: how many of the last rows couple the others (see the module docstring); any value
    gives the same point up to the centring's accuracy (near the optimum the factorisation gives out
    at a t that depends on the elimination order: allocations ~1e-4 apart), the right one only makes
    it faster. A problem's border is a function of its shape, so a run's point does not vary.
    ``row_weight`` (one per row) and ``col_weight`` (one per x column): the weights of the log terms
    (see the module docstring).
    """
    n = G.shape[1] - 1
    if n == 0:
        return np.zeros(0), 0.0
    p = _Problem(G, np.asarray(h, dtype=np.float64), border)
    p.wr = np.ones(p.r) if row_weight is None else np.asarray(row_weight, dtype=np.float64)
    p.wc = np.ones(n) if col_weight is None else np.asarray(col_weight, dtype=np.float64)
    v = p.start()
    m_c = float(np.add.reduce(p.wc)) + float(np.add.reduce(p.wr))  # n + rows without weights
    t = 1.0
    while True:
        v = p.centre(v, t)
        z = v[-1]
        if m_c / t <= GAP * max(1.0, abs(z)):
            return v[:n], float(z)
        t *= _GROWTH


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """a . b summed by NumPy's pairwise add.reduce (np.dot would call BLAS)."""
    return float(np.add.reduce(a * b))


class _Problem:
    """G split into its z column and the rest (entries in row-major order), and the Newton system's
    structure: which entries of M = S^2 + Gx X^2 Gx' are nonzero and which block each belongs to."""

    def __init__(self, G: csr_matrix, h: np.ndarray, border: int) -> None:
        from scipy.sparse import csr_matrix  # only here: a run without Gavel's LP never loads SciPy

        G = csr_matrix(G, dtype=np.float64, copy=True)
        G.sum_duplicates()
        G.eliminate_zeros()
        coo = G.tocoo()
        r, n = G.shape[0], G.shape[1] - 1
        row, col, val = coo.row.astype(np.int64), coo.col.astype(np.int64), coo.data
        on_z = col == n
        self.r, self.n, self.h = r, n, h
        self.wr, self.wc = np.ones(r), np.ones(n)  # the log terms' weights
        self.gz = np.zeros(r)
        self.gz[row[on_z]] = val[on_z]
        self.er, self.ec, self.ev = row[~on_z], col[~on_z], val[~on_z]
        self._pattern()
        self._blocks(min(max(int(border), 0), r))

    # ------------------------------------------------------------------ products in a fixed order
    def gx(self, x: np.ndarray) -> np.ndarray:
        """Gx @ x (the x columns of G), each row summed in column order."""
        return np.bincount(self.er, weights=self.ev * x[self.ec], minlength=self.r)

    def gxt(self, y: np.ndarray) -> np.ndarray:
        """Gx' @ y."""
        return np.bincount(self.ec, weights=self.ev * y[self.er], minlength=self.n)

    def slack(self, v: np.ndarray) -> np.ndarray:
        return self.h - (self.gx(v[:-1]) + self.gz * v[-1])

    def _pattern(self) -> None:
        """Every pair of entries in one column adds to one entry of M: list the pairs once."""
        r, ec = self.r, self.ec
        by_col = np.argsort(ec, kind="stable")  # within a column, in row order
        cols = ec[by_col]
        count = np.bincount(cols, minlength=self.n)
        first = np.cumsum(count) - count
        k = count[cols]
        a = np.repeat(np.arange(cols.size), k)
        b = first[cols[a]] + (np.arange(a.size) - np.repeat(np.cumsum(k) - k, k))
        ea, eb = by_col[a], by_col[b]
        self.p_col = ec[ea]
        self.p_val = self.ev[ea] * self.ev[eb]
        flat = np.concatenate([self.er[ea] * r + self.er[eb], np.arange(r) * (r + 1)])
        slots, inverse = np.unique(flat, return_inverse=True)
        self.p_slot, self.d_slot = inverse[: ea.size], inverse[ea.size:]
        self.n_slots = slots.size
        self.slot_i, self.slot_k = slots // r, slots % r

    def _blocks(self, border: int) -> None:
        """Split the first r - border rows into the connected blocks of M; group blocks by size."""
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import connected_components

        r, nA = self.r, self.r - border
        self.nA, self.border = nA, border
        i, k = self.slot_i, self.slot_k
        inner = (i < nA) & (k < nA)
        graph = csr_matrix((np.ones(int(inner.sum())), (i[inner], k[inner])), shape=(nA, nA))
        _, label = connected_components(graph, directed=False)
        size = np.bincount(label)
        rows = np.lexsort((np.arange(nA), label, size[label]))  # by block size, block, row
        grp_of = np.full(r, -1, dtype=np.int64)  # border rows belong to no group
        blk_of = np.zeros(r, dtype=np.int64)
        loc_of = np.zeros(r, dtype=np.int64)
        self.groups: list[_Group] = []
        at = 0
        for s in np.unique(size).tolist():
            nrows = int((size[label] == s).sum())
            g = _Group(rows[at:at + nrows].reshape(-1, s))
            at += nrows
            grp_of[g.rows] = len(self.groups)
            blk_of[g.rows] = np.arange(g.rows.shape[0])[:, None]
            loc_of[g.rows] = np.arange(s)[None, :]
            self.groups.append(g)
        for gi, g in enumerate(self.groups):
            s = g.size
            mine = grp_of[i] == gi
            a = mine & (k < nA)  # k is then in the same block
            g.a_slots = np.flatnonzero(a)
            g.a_flat = (blk_of[i[a]] * s + loc_of[i[a]]) * s + loc_of[k[a]]
            b = mine & (k >= nA)
            g.b_slots = np.flatnonzero(b)
            g.b_flat = (blk_of[i[b]] * s + loc_of[i[b]]) * border + (k[b] - nA)
        c = (i >= nA) & (k >= nA)
        self.c_slots = np.flatnonzero(c)
        self.c_flat = (i[c] - nA) * border + (k[c] - nA)

    # ------------------------------------------------------------------ the barrier
    def start(self) -> np.ndarray:
        """Equal x small enough to leave half of every row without z free; z below every row with z."""
        gz, h = self.gz, self.h
        free = gz == 0
        row_use = np.bincount(self.er, weights=np.abs(self.ev), minlength=self.r)[free]
        room = h[free]
        ratio = float(np.max(row_use / np.maximum(room, 1e-300))) if row_use.size else 1.0
        x = np.full(self.n, 0.5 / max(ratio, 1e-12))
        pos = gz > 0
        z = float(np.min((h[pos] - self.gx(x)[pos]) / gz[pos])) - 1.0 if pos.any() else 0.0
        return np.append(x, z)

    def centre(self, v: np.ndarray, t: float) -> np.ndarray:
        """Newton's method on -t z - sum wr log(h - G v) - sum wc log x from the strictly feasible ``v``."""
        n, gz, wr, wc = self.n, self.gz, self.wr, self.wc
        # Weights of 1 (every LP but the class LP) multiply or divide nothing: the same values.
        unit = bool((wr == 1.0).all() and (wc == 1.0).all())
        for _ in range(_MAX_NEWTON):
            x = v[:n]
            s = self.slack(v)
            inv_s = 1.0 / s
            w_inv_s = inv_s if unit else wr * inv_s
            gx = self.gxt(w_inv_s) - wc / x
            gzv = -t + _dot(gz, w_inv_s)
            x2 = x * x if unit else x * x / wc
            # Hxx = Gx' W S^-2 Gx + Wc X^-2; Hxx^-1 by Woodbury through M = S^2/W + Gx X^2/Wc Gx'.
            try:
                factor = self.factor(x2, s * s if unit else s * s / wr)
            except np.linalg.LinAlgError:
                break
            w2 = (gz if unit else gz * wr) * inv_s * inv_s
            hxz = self.gxt(w2)
            hzz = _dot(gz, w2)
            ys = (x2 * gx, x2 * hxz)
            u = factor.solve(np.stack([self.gx(y) for y in ys], axis=1))
            a = ys[0] - x2 * self.gxt(u[:, 0])
            b = ys[1] - x2 * self.gxt(u[:, 1])
            denom = hzz - _dot(hxz, b)
            dz = (-gzv + _dot(hxz, a)) / denom if denom > 0 else 0.0
            dx = -a - b * dz
            decrement = -(_dot(gx, dx) + gzv * dz)
            if decrement / 2 <= 1e-10:
                break
            gd = self.gx(dx) + gz * dz
            step = _line_search(s, gd, x, dx, t, dz, -decrement, None if unit else wr, None if unit else wc)
            if step <= 1e-12:
                break
            v = v + step * np.append(dx, dz)
        return v

    # ------------------------------------------------------------------ the Newton system
    def factor(self, x2: np.ndarray, s2: np.ndarray) -> _Factor:
        """Factor M = S^2 + Gx X^2 Gx' (raises LinAlgError when it is not numerically positive)."""
        mv = np.bincount(self.p_slot, weights=self.p_val * x2[self.p_col], minlength=self.n_slots)
        mv[self.d_slot] += s2
        nb = self.border
        f = _Factor(self)
        sc = np.zeros(nb * nb)
        sc[self.c_flat] = mv[self.c_slots]
        sc = sc.reshape(nb, nb)
        for g in self.groups:
            K, s = g.rows.shape
            a = np.zeros(K * s * s)
            a[g.a_flat] = mv[g.a_slots]
            inv = _inverse_cholesky(a.reshape(K, s, s))
            bw = np.zeros(K * s * nb)
            bw[g.b_flat] = mv[g.b_slots]
            bmat = bw.reshape(K, s, nb)
            w = _apply(inv, bmat)  # A^-1 B, block by block
            f.parts.append((inv, bmat, w))
            if nb:
                sc -= (bmat.reshape(-1, nb)[:, :, None] * w.reshape(-1, nb)[:, None, :]).sum(axis=0)
        f.sc_inv = _inverse_cholesky(sc[None]) if nb else None
        return f


class _Group:
    """Blocks of one size: their rows (K, s) and where M's entries go in them."""

    def __init__(self, rows: np.ndarray) -> None:
        self.rows = rows
        self.size = rows.shape[1]
        self.a_slots = self.a_flat = self.b_slots = self.b_flat = np.zeros(0, dtype=np.int64)


class _Factor:
    """M^-1 by blocks: per block L^-1 (so A^-1 = L^-T L^-1), A^-1 B, and the border's Schur complement."""

    def __init__(self, p: _Problem) -> None:
        self.p = p
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.sc_inv: np.ndarray | None = None

    def solve(self, f: np.ndarray) -> np.ndarray:
        """M^-1 f for f of shape (rows, q)."""
        p, nb = self.p, self.p.border
        q = f.shape[1]
        fc = f[p.nA:].copy()
        ys = []
        for g, (inv, bmat, _) in zip(p.groups, self.parts, strict=True):
            y = _apply(inv, f[g.rows])
            ys.append(y)
            if nb:
                fc -= (bmat.reshape(-1, nb)[:, :, None] * y.reshape(-1, q)[:, None, :]).sum(axis=0)
        u = np.empty_like(f)
        uc = _apply(self.sc_inv, fc[None])[0] if nb else fc
        u[p.nA:] = uc
        for g, (_, _, w), y in zip(p.groups, self.parts, ys, strict=True):
            u[g.rows] = y - (w[:, :, :, None] * uc[None, None, :, :]).sum(axis=2) if nb else y
        return u


def _inverse_cholesky(a: np.ndarray) -> np.ndarray:
    """L^-1 for each of the K blocks of ``a`` (K, s, s), symmetric positive definite, a = L L'.

    Column by column (Cholesky on the lower triangle; row j of L^-1 by forward substitution on the
    identity as soon as row j of L is known), every sum a NumPy add.reduce: the result does not
    depend on the CPU. Raises LinAlgError when a pivot is not positive.
    """
    s = a.shape[1]
    if s == 2:
        return _inverse_cholesky_2(a)
    if s == 3:
        return _inverse_cholesky_3(a)
    return _inverse_cholesky_any(a)


def _inverse_cholesky_any(a: np.ndarray) -> np.ndarray:
    """``_inverse_cholesky`` of blocks of any size (the written-out 2 x 2 and 3 x 3 ones give the
    same values, bit for bit: tests/tesserae/test_lp_center.py)."""
    s = a.shape[1]
    red = np.add.reduce
    L = np.zeros_like(a)
    inv = np.zeros_like(a)
    diag = np.empty(a.shape[:2])
    with np.errstate(invalid="ignore", divide="ignore"):
        for j in range(s):
            # The sums over k < j: none for j = 0 (0.0, as add.reduce of nothing), one term for j = 1
            # (add.reduce of one term is that term): written out, the same values in fewer calls.
            if j == 0:
                v = a[:, :, 0] - 0.0
                acc = np.zeros((a.shape[0], s))
            elif j == 1:
                v = a[:, 1:, 1] - L[:, 1:, 0] * L[:, 1:2, 0]
                acc = L[:, 1, 0, None] * inv[:, 0, :]
            else:
                v = a[:, j:, j] - red(L[:, j:, :j] * L[:, j:j + 1, :j], axis=2)
                acc = red(L[:, j, :j, None] * inv[:, :j, :], axis=1)
            root = np.sqrt(v[:, 0])
            diag[:, j] = root
            L[:, j, j] = root
            L[:, j + 1:, j] = v[:, 1:] / root[:, None]
            # Row j of L^-1: (e_j - L[j, :j] L^-1[:j]) / L[j, j].
            acc[:, j] -= 1.0
            inv[:, j, :] = acc / -root[:, None]
    if not (diag > 0).all() or not np.isfinite(diag).all() or not np.isfinite(inv).all():
        raise np.linalg.LinAlgError("not numerically positive definite")  # a NaN pivot propagates to the last
    return inv


def _inverse_cholesky_2(a: np.ndarray) -> np.ndarray:
    """``_inverse_cholesky`` of 2 x 2 blocks (every job's block in Gavel's plain LP), its operations
    written out: the same values, bit for bit, in a few calls instead of two passes of slicing."""
    a00, a10, a11 = a[:, 0, 0], a[:, 1, 0], a[:, 1, 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        r0 = np.sqrt(a00)
        n0 = -r0
        l10 = a10 / r0
        i00 = -1.0 / n0
        i01 = 0.0 / n0
        r1 = np.sqrt(a11 - l10 * l10)
        n1 = -r1
        inv = np.stack([i00, i01, (l10 * i00) / n1, (l10 * i01 - 1.0) / n1], axis=1).reshape(-1, 2, 2)
    diag = np.concatenate([r0, r1])
    if not (diag > 0).all() or not np.isfinite(diag).all() or not np.isfinite(inv).all():
        raise np.linalg.LinAlgError("not numerically positive definite")
    return inv


def _inverse_cholesky_3(a: np.ndarray) -> np.ndarray:
    """``_inverse_cholesky`` of 3 x 3 blocks (the border of three GPU types), written out as
    ``_inverse_cholesky_2``; its sums have at most two terms, whose order cannot change them."""
    a00, a10, a20, a11, a21, a22 = a[:, 0, 0], a[:, 1, 0], a[:, 2, 0], a[:, 1, 1], a[:, 2, 1], a[:, 2, 2]
    with np.errstate(invalid="ignore", divide="ignore"):
        r0 = np.sqrt(a00)
        n0 = -r0
        l10, l20 = a10 / r0, a20 / r0
        i00, i01, i02 = -1.0 / n0, 0.0 / n0, 0.0 / n0
        r1 = np.sqrt(a11 - l10 * l10)
        n1 = -r1
        l21 = (a21 - l20 * l10) / r1
        i10, i11, i12 = (l10 * i00) / n1, (l10 * i01 - 1.0) / n1, (l10 * i02) / n1
        r2 = np.sqrt(a22 - (l20 * l20 + l21 * l21))
        n2 = -r2
        i20 = (l20 * i00 + l21 * i10) / n2
        i21 = (l20 * i01 + l21 * i11) / n2
        i22 = ((l20 * i02 + l21 * i12) - 1.0) / n2
        inv = np.stack([i00, i01, i02, i10, i11, i12, i20, i21, i22], axis=1).reshape(-1, 3, 3)
    diag = np.concatenate([r0, r1, r2])
    if not (diag > 0).all() or not np.isfinite(diag).all() or not np.isfinite(inv).all():
        raise np.linalg.LinAlgError("not numerically positive definite")
    return inv


def _apply(inv: np.ndarray, f: np.ndarray) -> np.ndarray:
    """A^-1 f = L^-T (L^-1 f) block by block, for ``inv`` = L^-1 (K, s, s) and f (K, s, q)."""
    y = np.add.reduce(inv[:, :, :, None] * f[:, None, :, :], axis=2)
    return np.add.reduce(inv[:, :, :, None] * y[:, :, None, :], axis=1)


def _line_search(s: np.ndarray, gd: np.ndarray, x: np.ndarray, dx: np.ndarray, t: float, dz: float,
                 slope0: float, wr: np.ndarray | None, wc: np.ndarray | None) -> float:
    """A step along (dx, dz) near the barrier's minimum on that line, before it, strictly inside.

    The barrier is convex along the line, so its slope rises: take the largest step that stays
    inside (0.99 of the way to the boundary, at most 1) if the slope is still negative there, else
    look for the slope's zero by Newton steps kept inside a bracket, and stop on the near side of it
    once the slope is small. Only rational operations: no logarithm, the same result on every CPU.
    """
    top = 1.0
    grow = gd > 0
    if grow.any():
        top = min(top, 0.99 * float(np.min(s[grow] / gd[grow])))
    shrink = dx < 0
    if shrink.any():
        top = min(top, 0.99 * float(np.min(-x[shrink] / dx[shrink])))

    def slope(a: float) -> tuple[float, float]:
        us = gd / (s - a * gd)
        ux = dx / (x + a * dx)
        wus = us if wr is None else wr * us  # None: weights of 1
        wux = ux if wc is None else wc * ux
        return -t * dz + float(np.add.reduce(wus)) - float(np.add.reduce(wux)), _dot(wus, us) + _dot(wux, ux)

    a = top
    d, curv = slope(a)
    if d <= 0:
        return a
    lo, hi = 0.0, a
    for _ in range(_MAX_LINE):
        cand = a - d / curv if curv > 0 else -1.0
        if not lo < cand < hi:
            cand = 0.5 * (lo + hi)
        a = cand
        d, curv = slope(a)
        if d <= 0:
            lo = a
            if d >= _LINE_SLOPE * slope0:
                return a
        else:
            hi = a
    return lo

