"""Gavel's packed max-min LP solved over job classes: one variable per class and pair of classes.

Gavel's packed LP (``gavel_maxmin``) has a variable per job and GPU type and one per *pair of jobs*
with the same GPU count and type: with m active jobs, m^2 / 2 pair variables, which is why it does
not scale (issue 29: more than 120 s of CPU per decision at 256 GPUs). But two jobs with the same
job type, GPU count and priority weight (one *class*) have the same coefficients in every row, and
the set of pair variables is every pair of equal GPU counts: swapping two jobs of a class maps the
LP onto itself. The analytic centre of the optimal face (the point ``_lp_center`` finds, Gavel's
ECOS point) is unique, so it is fixed by every such swap: all jobs of a class get the same X, and
all pairs of jobs of two classes the same Y. So it is the centre of the LP restricted to those
symmetric points, with

- one variable X[c, t] per class c and type t (each job of c runs X[c, t] of the time on t);
- one variable Y[q, t] per pair of classes q = {c, d} with the same GPU count and type t (each of
  the n_c n_d job pairs, or n_c (n_c - 1) / 2 when c = d, runs Y[q, t] of the time on t);
- per class, the rows of one of its jobs: z <= its normalised throughput (its own X plus, for each
  partner class d, the n_d (or n_c - 1) pairs it belongs to), and its time <= 1;
- per type, the capacity row over all jobs and pairs (n_c k X[c, t] + N_q k Y[q, t]).

The barrier of the whole LP at such a point is the barrier of this small one with each log term
weighted by its number of copies (n_c per class row and X column, N_q per Y column, 1 per
capacity row): ``central_max_min`` with ``row_weight`` and ``col_weight`` follows the same
central path (the same start point, the same duality-gap schedule) in a problem of a few classes
instead of thousands of pairs. The point is then expanded back to every job and every pair.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tesserae.scheduling._lp_center import central_max_min


@dataclass(frozen=True)
class Classes:
    """The rows of one LP grouped into classes of identical jobs (first appearance order kept out:
    classes are sorted by their key, so the LP does not depend on the order rows come in)."""

    of_row: np.ndarray  # class of each row (positions in the LP's row list)
    first: np.ndarray  # one row position per class
    count: np.ndarray  # jobs per class

    @classmethod
    def group(cls, keys: np.ndarray) -> Classes:
        """``keys`` (rows, fields): rows with equal keys form one class."""
        _, first, inverse, count = np.unique(keys, axis=0, return_index=True, return_inverse=True,
                                             return_counts=True)
        return cls(inverse.reshape(-1).astype(np.int64), first.astype(np.int64), count.astype(np.int64))


@dataclass(frozen=True)
class ClassPairs:
    """The pairs of classes with the same GPU count that have at least one job pair."""

    a: np.ndarray  # the two classes, a <= b
    b: np.ndarray
    count: np.ndarray  # job pairs between them: n_a n_b, or n_a (n_a - 1) / 2 when a == b

    @classmethod
    def of(cls, classes: Classes, k: np.ndarray) -> ClassPairs:
        """Every pair of classes whose jobs have the same GPU count ``k`` (per class)."""
        n = classes.count
        a, b = np.triu_indices(n.size)
        same = k[a] == k[b]
        a, b = a[same], b[same]
        count = np.where(a == b, n[a] * (n[a] - 1) // 2, n[a] * n[b])
        keep = count > 0
        return cls(a[keep].astype(np.int64), b[keep].astype(np.int64), count[keep].astype(np.int64))

    def index(self, n_classes: int) -> np.ndarray:
        """(classes, classes) -> position in these pairs, -1 where there is none (both orders)."""
        at = np.full((n_classes, n_classes), -1, dtype=np.int64)
        at[self.a, self.b] = np.arange(self.a.size)
        at[self.b, self.a] = np.arange(self.a.size)
        return at


def pairs_complete(classes: Classes, cpairs: ClassPairs, pair_pos: np.ndarray) -> bool:
    """Whether the LP's pair variables (row positions, shape (P, 2)) are every pair of jobs with the
    same GPU count, each once: the symmetry the class LP rests on."""
    if pair_pos.size == 0:
        return cpairs.a.size == 0
    ca, cb = classes.of_row[pair_pos[:, 0]], classes.of_row[pair_pos[:, 1]]
    at = cpairs.index(classes.count.size)[ca, cb]
    if (at < 0).any() or (pair_pos[:, 0] == pair_pos[:, 1]).any():
        return False
    lo, hi = np.minimum(pair_pos[:, 0], pair_pos[:, 1]), np.maximum(pair_pos[:, 0], pair_pos[:, 1])
    if np.unique(lo * (int(hi.max()) + 1) + hi).size != lo.size:
        return False
    return bool(np.array_equal(np.bincount(at, minlength=cpairs.a.size), cpairs.count))


def central_by_classes(C: np.ndarray, k: np.ndarray, cap: np.ndarray, classes: Classes, cpairs: ClassPairs,
                       pair_coef: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """The centre of Gavel's packed max-min LP, per class: (X (classes, T), Y (class pairs, T), z).

    ``C`` (classes, T): each class's normalised throughput per unit of time alone on each type;
    ``k`` (classes,): its GPU count; ``pair_coef`` (class pairs, T, 2): the normalised throughput of
    a job of class a (``[..., 0]``) and of class b (``[..., 1]``) per unit of time of their pair.
    Every type gets a variable (as Gavel's LP), also where a rate is 0.
    """
    nc, T = C.shape
    nq = cpairs.a.size
    n = classes.count.astype(np.float64)
    qa, qb = cpairs.a, cpairs.b
    diag = qa == qb
    # How many pairs of class q one job of each side belongs to.
    m_a = np.where(diag, n[qa] - 1, n[qb])
    m_b = n[qa]
    nX, nY = nc * T, nq * T
    z = nX + nY
    xc = np.repeat(np.arange(nc), T)
    xt = np.tile(np.arange(T), nc)
    yq = np.repeat(np.arange(nq), T)
    yt = np.tile(np.arange(T), nq)
    ycol = nX + np.arange(nY)
    off = ~diag[yq]  # the b side of a pair of two different classes
    rows, cols, vals = [], [], []

    def add(r: np.ndarray, c: np.ndarray, v: np.ndarray) -> None:
        rows.append(r)
        cols.append(c)
        vals.append(v)

    # (1) z - throughput of one job of class c <= 0
    add(xc, np.arange(nX), -C[xc, xt])
    add(qa[yq], ycol, -m_a[yq] * pair_coef[yq, yt, 0])
    add(qb[yq][off], ycol[off], -m_b[yq][off] * pair_coef[yq, yt, 1][off])
    add(np.arange(nc), np.full(nc, z), np.ones(nc))
    # (2) time of one job of class c <= 1
    add(nc + xc, np.arange(nX), np.ones(nX))
    add(nc + qa[yq], ycol, m_a[yq])
    add(nc + qb[yq][off], ycol[off], m_b[yq][off])
    # (3) GPUs of type t <= cap_t
    add(2 * nc + xt, np.arange(nX), n[xc] * k[xc])
    add(2 * nc + yt, ycol, cpairs.count[yq] * k[qa[yq]].astype(np.float64))
    from scipy.sparse import csr_matrix  # only here: a run without Gavel's LP never loads SciPy

    G = csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(2 * nc + T, z + 1))
    h = np.concatenate([np.zeros(nc), np.ones(nc), np.asarray(cap, dtype=np.float64)])
    row_weight = np.concatenate([n, n, np.ones(T)])
    col_weight = np.concatenate([n[xc], cpairs.count[yq].astype(np.float64)])
    x, zstar = central_max_min(G, h, border=T, row_weight=row_weight, col_weight=col_weight)
    return x[:nX].reshape(nc, T), x[nX:].reshape(nq, T), zstar
