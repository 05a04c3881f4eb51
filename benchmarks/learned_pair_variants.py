"""Experiment (issue 25, branch i25-pairs): the pair model's variants on Gavel's single-GPU trace, one run each.

    PYTHONPATH=src .venv/bin/python benchmarks/learned_pair_variants.py VARIANT SEED
    PYTHONPATH=src .venv/bin/python benchmarks/learned_pair_variants.py --forms   # Gavel's table, in-sample fits

Variants of ``learned_gavel_trace.py``'s ``learned`` run (packed max-min, Gavel's placement, 5% noise):

- ``control``: the per-type terms pinned to 0 (the cross-type model of main: must reproduce its figures);
- ``type``: per-type sensitivity, pressure and population mean (``learned_pairs``), fitted with
  ``TYPE_RESIDUAL_SD`` 0.4 (``type-res015``: 0.15, the pair residual's sd); ``type-rank2``: plus rank-2
  latent vectors per family and type;
- ``type-means``: only the per-type population means free;
- ``type-shrunk``: ``type``, shown moved 1 sd toward the cross-type factor;
- ``lcb1``/``lcb03`` (``control`` plus a lower confidence bound of 1 / 0.3 sd on the shown sharing terms) and
  ``type-lcb1``/``type-lcb03`` (``type`` plus the same).

``--forms`` fits model forms to all of Gavel's single-GPU log pair factors (26 job types, 3 GPU types, a
zero rate counted as the floor 0.02) by alternating least squares and prints the share of variance each
explains, in sample.
"""

from __future__ import annotations

import functools
import sys

import numpy as np

import learned_gavel_trace as lg
from _report import SHARED_DATA


def forms() -> None:
    import json
    d = json.loads((SHARED_DATA / "gavel" / "simulation_throughputs.json").read_text())
    gpus = ["k80", "p100", "v100"]
    jobs = sorted(k for k in d["v100"] if k.endswith(", 1)"))
    J, T = len(jobs), len(gpus)
    L = np.full((J, J, T), np.nan)
    for t, g in enumerate(gpus):
        for i, a in enumerate(jobs):
            row = d[g][a]
            for j, b in enumerate(jobs):
                if b in row and row["null"] > 0:
                    L[i, j, t] = np.log(max(row[b][0] / row["null"], 0.02))
    ok = ~np.isnan(L)
    Y, W = np.nan_to_num(L), ok.astype(float)
    y = L[ok]

    def fit(rank: int, per_type_ab: bool, per_type_uv: bool, iters: int = 60, lam: float = 1e-3) -> np.ndarray:
        rng = np.random.default_rng(0)
        mu = np.nanmean(L, axis=(0, 1))
        a, b = np.zeros((J, T)), np.zeros((J, T))
        tu = T if per_type_uv else 1
        U, V = rng.normal(0, 0.1, (J, tu, rank)), rng.normal(0, 0.1, (J, tu, rank))

        def inter() -> np.ndarray | float:
            if not rank:
                return 0.0
            return np.einsum("itk,jtk->ijt", np.broadcast_to(U, (J, T, rank)), np.broadcast_to(V, (J, T, rank)))

        for _ in range(iters):
            R = Y - mu - b[None] - inter()
            a = (W * R).sum(1) / (W.sum(1) + lam) if per_type_ab else np.repeat(
                ((W * R).sum((1, 2)) / (W.sum((1, 2)) + lam))[:, None], T, 1)
            R = Y - mu - a[:, None] - inter()
            b = (W * R).sum(0) / (W.sum(0) + lam) if per_type_ab else np.repeat(
                ((W * R).sum((0, 2)) / (W.sum((0, 2)) + lam))[:, None], T, 1)
            if rank:
                R = Y - mu - a[:, None] - b[None]
                for X, Z, Rm, Wm in ((U, V, R, W), (V, U, R.transpose(1, 0, 2), W.transpose(1, 0, 2))):
                    for i in range(J):
                        if per_type_uv:
                            for t in range(T):
                                w, M = Wm[i, :, t], Z[:, t, :]
                                X[i, t] = np.linalg.solve((M * w[:, None]).T @ M + lam * np.eye(rank),
                                                          (M * w[:, None]).T @ Rm[i, :, t])
                        else:
                            w, M = Wm[i].ravel(), np.repeat(Z[:, 0, :][:, None, :], T, 1).reshape(J * T, rank)
                            X[i, 0] = np.linalg.solve((M * w[:, None]).T @ M + lam * np.eye(rank),
                                                      (M * w[:, None]).T @ Rm[i].ravel())
        return mu + a[:, None] + b[None] + inter()

    for ab in (False, True):
        for uv in (False, True):
            for rank in (0, 1, 2, 3):
                if rank == 0 and uv:
                    continue
                P = fit(rank, ab, uv)
                r2 = 1 - ((L - P)[ok] ** 2).sum() / ((y - y.mean()) ** 2).sum()
                print(f"a, b per type {ab!s:5}  latent per type {uv!s:5}  rank {rank}: {r2:.1%} of the variance")


def main() -> None:
    if sys.argv[1] == "--forms":
        forms()
        return
    import tesserae.profiles.learned_pairs as lp
    import tesserae.sim.learning as sl
    from tesserae.profiles.learned import LearnedConfig
    name, seed = sys.argv[1], int(sys.argv[2])
    lp.TYPE_RESIDUAL_SD = 0.15 if name == "type-res015" else 0.4
    if name.startswith(("control", "lcb", "type-means")):
        orig = lp.Pairs._pair_prior_means

        def pinned(self: lp.Pairs, slots: np.ndarray) -> tuple[np.ndarray, ...]:
            out = list(orig(self, slots))
            out[5][:] = 0.0
            out[6][:] = 0.0
            out[7][:] = 1e-8
            out[8][:] = 1e-8
            return tuple(out)

        lp.Pairs._pair_prior_means = pinned  # type: ignore[method-assign]
        if not name.startswith("type-means"):
            lp.TYPE_MEAN_SD = 1e-4
    if name.endswith("rank2"):
        sl.LearnedConfig = functools.partial(LearnedConfig, pair_rank=2)  # type: ignore[misc]
    if name.endswith("shrunk"):
        lp.SHOWN_SDS = 1.0
    if "lcb" in name:
        lp.LCB_SDS = 0.3 if name.endswith("03") else 1.0
    r = lg.run_one("benchmarks/inputs/gavel/single_heavy.trace", "learned", seed)
    print(name, seed, f"JCT {r['avg_jct'] / 3600:.2f} h, harmful pairs {r['harmful_pairs']}, paired "
          f"{r['paired_share']:.0%}, exploration {r['exploration_share']:.2%}, vetoed {r['vetoed_pairs']}, "
          f"cpu {r['cpu_seconds']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
