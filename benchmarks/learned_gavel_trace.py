"""Learned rates on Gavel's single-GPU trace under packed max-min: what each part of learning costs (issue 25).

    .venv/bin/python benchmarks/learned_gavel_trace.py --trace TRACE [--seeds 3] [--only VARIANT] [--rerun]

``TRACE`` is Gavel's ``single_heavy.trace``, made by Gavel's own generator (``generate_trace.py --num_jobs 150
-l 500 --seed 4 --throughputs_file simulation_throughputs.json``; Gavel's code stays outside this repository,
so the trace is given by path). It is the one input on which Gavel's matrix-completion estimator also runs
(``docs/reproduction/learned.md``, "Gavel's own estimator side by side"): 150 single-GPU jobs on 4 K80 +
4 P100 + 4 V100, Gavel's table as the truth, 360 s rounds, no restart cost, Gavel's max-min policy.

Variants (all with Gavel's placement, as Gavel runs):

- ``plain``: the plain LP reading the true rates (packing's baseline); ``packed``: the packed LP reading them;
- ``learned``: the packed LP on learned rates (``--throughputs learned``, 5% observation noise);
- ``given-alone``: the same, but the estimator is told every job's true alone rate on each GPU type at
  arrival (``learned_alone = 'given'``), as Gavel's estimator is: what is left is learning the pairs;
- ``learned-noexplore`` and ``given-alone-noexplore``: the same two without exploration (budget 0).

Packing's gain of a variant is ``plain``'s average JCT over the variant's; the share of the oracle's
packing gain it keeps is log(gain) / log(``packed``'s gain). Each variant's exploration (share of
GPU-time), pairs formed that are slower in truth than the two jobs alone (count, split within two rounds,
share of GPU-time spent in them), vetoes and the share of GPU-time paired are recorded.

Results go to ``docs/reproduction/learned_gavel_trace.json`` (a cache keyed by variant and seed);
``benchmarks/reproduce_learned.py --report-only`` puts them in ``learned.md``.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import sys
import time
from typing import Any

from _report import ROOT, SHARED_DATA, machine, today

OUT = ROOT / "docs" / "reproduction" / "learned_gavel_trace.json"
PROFILE = SHARED_DATA / "gavel" / "simulation_throughputs.json"
CLUSTER = "4x1:k80,4x1:p100,4x1:v100"
ROUND, NOISE = 360.0, 0.05
#: name -> (throughputs, policy packs, alone rates, exploration budget)
VARIANTS: dict[str, tuple[str, bool, str, float]] = {
    "plain": ("oracle", False, "learned", 0.1),
    "packed": ("oracle", True, "learned", 0.1),
    "learned": ("learned", True, "learned", 0.1),
    "given-alone": ("learned", True, "given", 0.1),
    "learned-noexplore": ("learned", True, "learned", 0.0),
    "given-alone-noexplore": ("learned", True, "given", 0.0),
}
KEYS = ("jobs", "completed", "avg_jct", "makespan", "exploration_share", "harmful_pairs",
        "harmful_pairs_undone_within_2", "harmful_pairs_kept", "harmful_pair_share", "paired_share", "vetoed_pairs",
        "stalled_runs", "estimate_error", "estimate_error_paired", "packed_pairs_per_round_mean")


def run_one(trace: str, variant: str, seed: int) -> dict[str, Any]:
    from tesserae.config import RunSpec
    from tesserae.core.cluster import parse_cluster_spec
    from tesserae.profiles.loader import load_profile
    from tesserae.sim.runner import simulate
    from tesserae.traces.readers import read_trace

    info, packs, alone, budget = VARIANTS[variant]
    model = load_profile(PROFILE)
    cluster = parse_cluster_spec(CLUSTER)
    specs = read_trace(trace, "gavel", model)
    spec = RunSpec.flat(policy="gavel-maxmin", packing=packs, placement="gavel", round_seconds=ROUND,
                        restart_overhead=0.0, throughputs=info, rate_noise=NOISE if info == "learned" else 0.0,
                        learned_alone=alone, explore_budget=budget)
    cpu0 = time.process_time()
    _res, s = simulate(specs, cluster, model, spec, seed=seed)
    out = {k: s.get(k) for k in KEYS}
    out.update(variant=variant, seed=seed, label=s.get("label"), cpu_seconds=time.process_time() - cpu0)
    return out


def load() -> dict[str, Any]:
    if OUT.exists():
        return json.loads(OUT.read_text())
    return {"runs": {}, "sessions": []}


def save(data: dict[str, Any]) -> None:
    tmp = OUT.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, OUT)


def gains(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Per variant: mean JCT over its seeds, packing's gain over ``plain``, the share of ``packed``'s gain kept
    and the mean learning figures (what ``learned.md`` shows)."""
    runs = data["runs"]
    plain = [r["avg_jct"] for k, r in runs.items() if k.startswith("plain/")]
    if not plain:
        return []
    base = plain[0]
    packed = [r["avg_jct"] for k, r in runs.items() if k.startswith("packed/")]
    oracle_gain = base / packed[0] if packed else None
    out = []
    for v in VARIANTS:
        rs = [r for k, r in sorted(runs.items()) if k.startswith(v + "/")]
        if not rs:
            continue
        jct = sum(r["avg_jct"] for r in rs) / len(rs)
        gain = base / jct
        kept = math.log(gain) / math.log(oracle_gain) if oracle_gain and abs(math.log(oracle_gain)) > 1e-9 else None

        def mean(key: str, rs: list[dict[str, Any]] = rs) -> float | None:
            vals = [r[key] for r in rs if r.get(key) is not None]
            return sum(vals) / len(vals) if vals else None

        out.append({"variant": v, "seeds": len(rs), "avg_jct": jct, "jct_min": min(r["avg_jct"] for r in rs),
                    "jct_max": max(r["avg_jct"] for r in rs), "gain": gain, "kept": kept,
                    **{k: mean(k) for k in ("exploration_share", "harmful_pairs", "harmful_pairs_undone_within_2",
                                            "harmful_pairs_kept", "harmful_pair_share", "paired_share",
                                            "vetoed_pairs", "stalled_runs")}})
    return out


TEXT = {"plain": "oracle, plain LP (packing's baseline)", "packed": "oracle, packed LP",
        "learned": "learned", "given-alone": "learned, alone rates given",
        "learned-noexplore": "learned, no exploration", "given-alone-noexplore": "learned, alone rates given, no "
        "exploration"}


def report_lines() -> list[str]:
    """The table of ``learned.md`` for these runs (empty when none is cached)."""
    data = load()
    rows = gains(data)
    if not rows:
        return []

    def p(x: float | None, d: int = 1) -> str:
        return "-" if x is None else f"{100 * x:.{d}f}%"

    def n(x: float | None) -> str:
        return "-" if x is None else f"{x:.0f}"

    L = ["Ours, variant by variant, on the same trace, cluster and rounds (`benchmarks/learned_gavel_trace.py`, "
         "`learned_gavel_trace.json`; Gavel's placement, 5% observation noise in learned runs; the learned "
         "variants' JCT is the mean over their seeds, with the lowest and highest). *Alone rates given*: the "
         "estimator is told each job's true alone rate on every GPU type at arrival (`learned_alone = 'given'`), "
         "as Gavel's estimator is; what is left to learn is the pairs. Harmful pairs: formed while slower in "
         "truth than the two jobs alone; their GPU-time is the share of busy GPU-time spent in them.", "",
         "| variant | seeds | avg JCT (h) [min, max] | packing's gain | kept | exploration | paired GPU-time | "
         "harmful pairs (undone <= 2 rounds, kept) | in harmful pairs | vetoed |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        L.append(f"| {TEXT[r['variant']]} | {r['seeds']} | {r['avg_jct'] / 3600:.2f} [{r['jct_min'] / 3600:.2f}, "
                 f"{r['jct_max'] / 3600:.2f}] | {r['gain']:.3f}x | {p(r['kept'], 0)} | {p(r['exploration_share'], 2)} "
                 f"| {p(r['paired_share'], 0)} | {n(r['harmful_pairs'])} ({n(r['harmful_pairs_undone_within_2'])}, "
                 f"{n(r['harmful_pairs_kept'])}) | {p(r['harmful_pair_share'])} | {n(r['vetoed_pairs'])} |")
    L.append("")
    for sess in data["sessions"]:
        if sess["runs"]:
            L.append(f"- {sess['date']}: `{sess['command']}` on {sess['machine']}: {sess['runs']} runs, load "
                     + " ".join(f"{x:.1f}" for x in sess["load"]) + " at its start")
    L.append("")
    return L


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", required=True, help="Gavel's single_heavy.trace (made by Gavel's generate_trace.py)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds of the learned variants (the oracle's runs: 1)")
    ap.add_argument("--only", action="append", default=[], help="variants matching this shell pattern")
    ap.add_argument("--rerun", action="store_true")
    args = ap.parse_args()
    if not os.path.isfile(args.trace):
        sys.exit(f"{args.trace}: no such trace file")
    data = load()
    todo = [(v, s) for v in VARIANTS for s in range(1 if VARIANTS[v][0] == "oracle" else args.seeds)
            if not args.only or any(fnmatch.fnmatchcase(v, p) for p in args.only)]
    todo = [(v, s) for v, s in todo if args.rerun or f"{v}/seed{s}" not in data["runs"]]
    session = {"date": today(), "machine": machine(), "load": os.getloadavg(), "runs": 0,
               "command": "benchmarks/learned_gavel_trace.py " + " ".join(
                   a if not a.endswith(".trace") else os.path.basename(a) for a in sys.argv[1:])}
    data["sessions"].append(session)
    for v, s in todo:
        r = run_one(args.trace, v, s)
        data["runs"][f"{v}/seed{s}"] = r
        session["runs"] += 1
        session["load_end"] = os.getloadavg()
        save(data)
        print(f"{v}/seed{s}: JCT {r['avg_jct'] / 3600:.2f} h, exploration {r.get('exploration_share') or 0:.2%}, "
              f"harmful pairs {r.get('harmful_pairs')}, cpu {r['cpu_seconds']:.0f} s", flush=True)
    for g in gains(data):
        print(f"{g['variant']:24s} {g['avg_jct'] / 3600:6.2f} h  gain {g['gain']:.3f}x  kept "
              + ("-" if g["kept"] is None else f"{g['kept']:.0%}"))


if __name__ == "__main__":
    main()
