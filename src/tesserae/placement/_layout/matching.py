"""The regrouped layout's matching of logical nodes to physical nodes of the same size (DESIGN §4.1).

w(L, P) = sum over the jobs j of logical node L of min(GPUs of j on L, GPUs j held on P): the GPUs
that can stay. A sparse maximum-weight bipartite matching
(``scipy.sparse.csgraph.min_weight_full_bipartite_matching``) maximises the GPUs that stay; only
logical nodes with continuing jobs and the physical nodes they ran on carry weight, the rest map in
position order.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tesserae.placement._layout.nodes import Parts, TypeNodes


def match_nodes(nodes: TypeNodes, logical: Mapping[int, Parts], held: Mapping[int, Parts]) -> np.ndarray:
    """Each logical node's physical node position, by maximum-weight matching (see module docstring).

    Only logical nodes with weight and the physical nodes they can reach enter the solver; each
    such logical node also gets a private dummy column of negligible weight, so that a matching
    saturating the logical side always exists (``min_weight_full_bipartite_matching`` needs one)
    and the graph stays sparse. Logical nodes left unmatched take the remaining physical nodes of
    their size in index order.
    """
    n = nodes.nodes.size
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for r, hparts in held.items():
        for lb, c in logical[r]:
            for pb, h in hparts:
                if nodes.cap[lb] == nodes.cap[pb]:
                    rows.append(lb)
                    cols.append(pb)
                    vals.append(float(min(c, h)))
    mapping = np.full(n, -1, dtype=np.int64)
    if vals:
        from scipy.sparse import coo_matrix  # only here: a fifo run never loads SciPy
        from scipy.sparse.csgraph import min_weight_full_bipartite_matching

        lrows, ri = np.unique(np.asarray(rows), return_inverse=True)
        pcols, ci = np.unique(np.asarray(cols), return_inverse=True)
        nr, nc = lrows.size, pcols.size
        eps = 1e-6  # a dummy edge never outweighs one GPU that can stay
        m = coo_matrix((np.concatenate([vals, np.full(nr, eps)]),
                        (np.concatenate([ri, np.arange(nr)]), np.concatenate([ci, nc + np.arange(nr)]))),
                       shape=(nr, nc + nr)).tocsr()  # duplicate (L, P) entries are summed
        row_ind, col_ind = min_weight_full_bipartite_matching(m, maximize=True)
        real = col_ind < nc
        mapping[lrows[row_ind[real]]] = pcols[col_ind[real]]
    used = np.zeros(n, dtype=bool)
    used[mapping[mapping >= 0]] = True
    for c in np.unique(nodes.cap).tolist():
        todo = np.flatnonzero((mapping < 0) & (nodes.cap == c))
        spare = np.flatnonzero(~used & (nodes.cap == c))
        mapping[todo] = spare[: todo.size]
    return mapping
