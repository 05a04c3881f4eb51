"""Decision latency of one whole scheduling round (order, allocate, pack, place) at scale.

For each cluster size (8 GPUs a node) the cluster starts with about 1.2 active jobs per GPU
(Philly-like GPU-count mix 1/2/4/8 = 0.7/0.1/0.15/0.05, job types of the built-in model) and
evolves in the simulator for ``--rounds`` rounds: jobs finish, new ones arrive at the rate that
keeps the load steady, attained service grows, so the migration matching has real work. The
first rounds (cold start: nothing placed yet) are excluded. Each configuration and size runs in
its own process; a configuration whose round exceeds 60 s of CPU time (wall time on a shared machine
also counts other processes) is not tried at larger sizes.

    .venv/bin/python benchmarks/round_latency.py                 # all sizes, writes BENCHMARKS.md
    .venv/bin/python benchmarks/round_latency.py --gpus 16384 --jobs 20000 --rounds 20 --json
    .venv/bin/python benchmarks/round_latency.py --tenants 100 --configs fifo:consolidated,tiresias-las:tesserae
    .venv/bin/python benchmarks/round_latency.py --gpus 65536 --gpus 131072 --configs tiresias-las:consolidated,...
    .venv/bin/python benchmarks/round_latency.py --profile --gpus 16384 --configs tiresias-las:tesserae+packing

``--profile`` runs one configuration at one size in this process, profiles each measured decision
with pyinstrument (a dev dependency) and prints the top frames of all of them together and the
time of each step of the decision (policy order, allocator walk, type choice, packing, anchored
layout, regrouped layout, assignments), per decision: what makes a decision slow, reproducibly.
It writes nothing to BENCHMARKS.md.

``--tenants N`` also measures every configuration with N tenant queues (10 organisations of N/10
teams; guarantees split the cluster evenly among the organisations and their teams; each job goes
to a team drawn from a skewed (Dirichlet 0.5) distribution, so some teams borrow and others lend).

Each row also records the child's peak resident memory. For every configuration the growth
exponent of the median decision time in the cluster size is fitted over its largest measured
sizes; a size it was not measured at (it did not fit the machine or the time budget) is shown as
an extrapolation from that exponent, marked as such.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from _report import ROOT, machine, merge_rows, today, update_section

SIZES = [256, 1024, 4096, 16384]
CONFIGS = [
    "fifo:consolidated",
    "tiresias-las:consolidated",
    "las:first-fit",
    "tiresias-las:tiresias",
    "tiresias-gittins:tiresias",
    "tiresias-las:tesserae",
    "tiresias-las:tesserae+packing",
    "gavel-maxmin:gavel",
    "gavel-maxmin:gavel+packing",
]
WARMUP_ROUNDS = 3
ROUND_LIMIT_S = 60.0
#: ``--learned``: relative noise of each observed rate, and the spread of the per-job true-rate factors.
LEARNED_NOISE = 0.05
LEARNED_VARIATION = 0.3


class Abort(Exception):
    pass


def tenant_queues(gpus: int, tenants: int) -> tuple[dict, list[str]]:
    """10 organisations x tenants/10 teams, guarantees split evenly (remainders to the first)."""
    orgs = 10 if tenants >= 10 else 1
    teams = max(tenants // orgs, 1)
    queues, leaves = [], []
    org_g = [gpus // orgs + (1 if i < gpus % orgs else 0) for i in range(orgs)]
    for o in range(orgs):
        queues.append({"name": f"org{o}", "guarantee": org_g[o]})
        for t in range(teams):
            g = org_g[o] // teams + (1 if t < org_g[o] % teams else 0)
            queues.append({"name": f"org{o}-team{t}", "parent": f"org{o}", "guarantee": g})
            leaves.append(f"org{o}-team{t}")
    return {"queues": queues}, leaves


def build_state(gpus: int, jobs: int, rounds: int, seed: int, tenants: int = 0) -> tuple[object, list]:
    from tesserae.core.cluster import parse_cluster_spec
    from tesserae.core.jobs import JobSpec
    from tesserae.profiles.default_model import DefaultModel

    cluster = parse_cluster_spec(f"{gpus // 8}x8")
    model = DefaultModel()
    rng = np.random.default_rng(seed)
    types = model.job_types()
    mix_g, mix_p = np.array([1, 2, 4, 8]), np.array([0.7, 0.1, 0.15, 0.05])
    # Durations 5 min .. ~2.6 h (log-uniform) so that jobs finish every round.
    mean_d = 300 * (10 ** 1.5 - 1) / (1.5 * np.log(10))
    rate = gpus / (float((mix_g * mix_p).sum()) * mean_d)  # arrivals/s for a steady offered load of 1
    horizon = (rounds + WARMUP_ROUNDS + 1) * 300.0
    n_arrivals = int(rate * horizon)
    submit = np.concatenate([np.zeros(jobs), np.sort(rng.uniform(1.0, horizon, n_arrivals))])
    n = submit.size
    g = rng.choice(mix_g, size=n, p=mix_p)
    d = 300 * 10 ** rng.uniform(0, 1.5, size=n)
    ty = rng.integers(len(types), size=n)
    queue = [""] * n
    if tenants:
        _, leaves = tenant_queues(gpus, tenants)
        share = rng.dirichlet(np.full(len(leaves), 0.5))
        queue = [leaves[k] for k in rng.choice(len(leaves), size=n, p=share)]
    specs = [JobSpec(i, float(submit[i]), int(g[i]), types[int(ty[i])], float(d[i]), float(d[i]), queue=queue[i])
             for i in range(n)]
    return cluster, specs


def measure(label: str, gpus: int, jobs: int, rounds: int, seed: int, budget_s: float, tenants: int = 0,
            profiled: list | None = None, interval: float = 0.001, variation: bool = False) -> dict:
    """One configuration at one size; with ``profiled`` (a list), each decision after the warm-up runs
    under its own pyinstrument profiler and (session, CPU seconds) is appended to it."""
    from tesserae.config import RunSpec, build_scheduler, parse_run_label
    from tesserae.core.queues import build_tree, parse_config
    from tesserae.profiles.default_model import DefaultModel
    from tesserae.scheduler_learned import LearnedScheduler
    from tesserae.sim.engine import SimConfig, Simulator
    from tesserae.sim.learning import prepare

    cluster, specs = build_state(gpus, jobs, rounds, seed, tenants)
    run = parse_run_label(label, RunSpec())
    tree = build_tree(parse_config(tenant_queues(gpus, tenants)[0]), gpus_by_type=cluster.gpus_by_type) \
        if tenants else None
    # {learned}/{generic} configurations: the true rates vary per job (LEARNED_VARIATION) in every mode of
    # a --learned comparison, and a learned run observes them with LEARNED_NOISE.
    learning = prepare(run.throughputs, specs, cluster, DefaultModel(), rate_noise=LEARNED_NOISE,
                       rate_variation=LEARNED_VARIATION if variation else 0.0, seed=seed)
    inner = learning.wrap(build_scheduler(cluster, learning.scheduler_model, run, tree))
    extra = {"estimator": inner.estimator} if isinstance(inner, LearnedScheduler) else {}
    times: list[float] = []
    cpu: list[float] = []
    active_counts: list[int] = []
    started = time.perf_counter()

    class Timed(type(inner)):  # type: ignore[misc]
        def decide(self, now, table, active, previous):  # type: ignore[no-untyped-def]
            profiler = None
            if profiled is not None and len(times) >= WARMUP_ROUNDS:
                from pyinstrument import Profiler

                profiler = Profiler(interval=interval)
                profiler.start()
            t0, c0 = time.perf_counter(), time.process_time()
            plan = super().decide(now, table, active, previous)
            dt = time.perf_counter() - t0
            times.append(dt)
            cpu.append(time.process_time() - c0)
            if profiler is not None and profiled is not None:
                profiled.append((profiler.stop(), cpu[-1]))
            active_counts.append(int(active.size))
            if cpu[-1] > ROUND_LIMIT_S or (time.perf_counter() - started > budget_s and len(times) > WARMUP_ROUNDS + 2):
                raise Abort
            return plan

    sched = Timed(cluster, inner.policy, inner.placement, inner.model, inner.config, queues=inner.queues, **extra)
    if learning.observer is not None:
        learning.observer.scheduler = sched
    sim = Simulator(specs, cluster, sched, SimConfig(round_seconds=300.0, restart_overhead=30.0),
                    **learning.engine_options())
    aborted = False
    try:
        sim.run(until=(rounds + WARMUP_ROUNDS) * 300.0)
    except Abort:
        aborted = True
    measured = np.array(times[WARMUP_ROUNDS:] if len(times) > WARMUP_ROUNDS + 1 else times)
    cpu_measured = np.array(cpu[WARMUP_ROUNDS:] if len(cpu) > WARMUP_ROUNDS + 1 else cpu)
    refresh = getattr(sched, "refresh_seconds", [])
    refresh = np.array(refresh[WARMUP_ROUNDS:] if len(refresh) > WARMUP_ROUNDS + 1 else refresh)
    classes = getattr(sched, "class_counts", [])
    fits = learning.observer.refresh_seconds if learning.observer is not None else []
    fits = np.array(fits[WARMUP_ROUNDS:] if len(fits) > WARMUP_ROUNDS + 1 else fits)
    return {"label": label, "refresh_median_s": float(np.median(refresh)) if refresh.size else None,
            "estimator_refresh_median_s": float(np.median(fits)) if fits.size else None,
            "classes_median": float(np.median(classes)) if len(classes) else None,
            "gpus": gpus, "jobs": jobs, "policy": run.policy, "placement": run.placement, "packing": run.packing,
            "tenants": tenants,
            "rounds": int(measured.size), "median_s": float(np.median(measured)),
            "p95_s": float(np.percentile(measured, 95)), "max_s": float(measured.max()),
            "cold_start_s": times[0], "active_jobs_median": int(np.median(active_counts)),
            "over_limit": bool(max(cpu) > ROUND_LIMIT_S), "cut_short": aborted,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "cpu_median_s": float(np.median(cpu_measured)), "cpu_p95_s": float(np.percentile(cpu_measured, 95))}


#: The sizes the scale issue asks for; one not measured is extrapolated from the fitted exponent.
TARGET_SIZES = [16384, 65536, 131072]


def growth_lines(rows: list[dict]) -> list[str]:
    """Per configuration: the exponent b of median ~ GPUs^b over its (up to) three largest measured
    sizes of at least 1,024 GPUs, and the median it implies at target sizes it was not measured at."""
    out = ["Growth of the median decision time with the cluster size (least squares on log-log over the "
           "largest sizes measured, on the CPU median where recorded, else the wall median; **extrapolated** "
           "values are not measurements):", "",
           "| configuration | sizes fitted | exponent | measured / extrapolated median at 16k, 64k, 128k GPUs (s) "
           "| peak memory at the largest size (MB) |", "| --- | --- | --- | --- | --- |"]
    labels = sorted({f"{r['policy']}:{r['placement']}{'+packing' if r['packing'] else ''}" for r in rows},
                    key=lambda lb: CONFIGS.index(lb) if lb in CONFIGS else 99)
    for label in labels:
        pts = sorted((r["gpus"], r.get("cpu_median_s") or r["median_s"], r.get("peak_mb")) for r in rows
                     if f"{r['policy']}:{r['placement']}{'+packing' if r['packing'] else ''}" == label
                     and r["gpus"] >= 1024 and not r["over_limit"])[-3:]
        if len(pts) < 2:
            continue
        b, a = np.polyfit(np.log([p[0] for p in pts]), np.log([p[1] for p in pts]), 1)
        have = {p[0]: p[1] for p in pts}
        cells = [f"{have[g]:.3f}" if g in have else f"**{np.exp(a) * g ** b:.3f} (extrapolated)**"
                 for g in TARGET_SIZES]
        mem = pts[-1][2]
        out.append(f"| {label} | {', '.join(str(p[0]) for p in pts)} | {b:.2f} | {' / '.join(cells)} "
                   f"| {f'{mem:.0f} at {pts[-1][0]}' if mem else 'not recorded'} |")
    return out


def _opt(row: dict, key: str, fmt: str) -> str:
    return format(row[key], fmt) if row.get(key) is not None else "not recorded"


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5))
    labels = sorted({(r["policy"], r["placement"], r["packing"]) for r in rows}, key=str)
    for key in labels:
        pts = sorted((r["gpus"], r["median_s"]) for r in rows if (r["policy"], r["placement"], r["packing"]) == key)
        xs, ys = zip(*pts, strict=True)
        ax.plot(xs, ys, marker="o", label=f"{key[0]}:{key[1]}{'+packing' if key[2] else ''}")
    ax.axhline(0.1, color="grey", linestyle=":", linewidth=0.8)
    ax.axhline(1.0, color="grey", linestyle=":", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("cluster GPUs (8 per node; ~1.2 active jobs per GPU)")
    ax.set_ylabel("median decision time (s)")
    ax.set_title("One scheduling decision vs cluster size")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


#: The steps of one decision, each opened by these frames (function, file); a sample goes to the
#: innermost step on its stack, so the steps partition the decision's time.
STEPS = [
    ("policy order and credit", [("order", None), ("credit", None), ("_ran", "scheduler.py"),
                                 ("held_first", "allocator.py")]),
    ("allocator walk", [("walk", "allocator.py"), ("walk", "scheduler_queues.py")]),
    ("type choice", [("_choose_types", "tesserae.py")]),
    ("packing", [("pack", None)]),
    ("anchored layout", [("anchored_layout", "anchored.py")]),
    ("regrouped layout", [("regrouped_layout", "regrouped.py")]),
    ("layout, rest (type placer, other placements)", [("place", None)]),
    ("assignments (rest of finish)", [("finish", None)]),
    ("plan diff", [("diff", "plan.py")]),
]


def profile_main(args: argparse.Namespace, sizes: list[int]) -> None:
    """``--profile``: one configuration at one size, each measured decision profiled (see module docstring)."""
    from pyinstrument.session import Session

    from _profile import print_top_frames, step_times

    labels = args.configs.split(",")
    if len(labels) != 1 or len(sizes) != 1:
        sys.exit("--profile takes one configuration (--configs) and one size (--gpus)")
    label, g = labels[0], sizes[0]
    profiled: list = []
    row = measure(label, g, args.jobs or int(1.2 * g), args.rounds, args.seed, args.budget, args.tenants,
                  profiled, args.interval)
    if not profiled:
        sys.exit(f"no decision after the {WARMUP_ROUNDS} warm-up rounds was profiled (raise --budget)")
    print(json.dumps(row))
    sessions = [s for s, _ in profiled]
    combined = sessions[0]
    for s in sessions[1:]:
        combined = Session.combine(combined, s)
    root = combined.root_frame()
    cpus = np.array([c for _, c in profiled])
    print(f"\n{label} at {g} GPUs: {len(profiled)} decisions profiled (after {WARMUP_ROUNDS} warm-up rounds), "
          f"CPU per decision with the profiler: median {np.median(cpus):.3f} s, max {cpus.max():.3f} s")
    if root is not None:
        print_top_frames(root, args.top)
    # Per decision: each step's share of the sampled time, times the decision's CPU time (the
    # sampler counts wall time, which on a shared machine also holds other processes' turns).
    per = []
    for s, c in profiled:
        r = s.root_frame()
        st = step_times(r, STEPS, "rest of decide") if r is not None else {}
        total = sum(st.values()) or 1.0
        per.append({k: v * c / total for k, v in st.items()})
    names = [lb for lb, _ in STEPS] + ["rest of decide"]
    print("\nsteps of one decision (CPU seconds: share of the decision's samples x its CPU time):")
    print("| step | share | median per decision (s) | rounds with it | median in those rounds (s) | max (s) |")
    print("| --- | --- | --- | --- | --- | --- |")
    whole = sum(sum(p.values()) for p in per) or 1.0
    for name in names:
        v = np.array([p.get(name, 0.0) for p in per])
        if not v.any():
            continue
        some = v[v > 0]
        print(f"| {name} | {100 * v.sum() / whole:.1f}% | {np.median(v):.4f} | {some.size}/{v.size} "
              f"| {np.median(some):.4f} | {v.max():.4f} |")
    seen = [n for n in names if any(p.get(n, 0.0) for p in per)]
    print("\neach decision (CPU ms with the profiler, then each step's estimate as above):")
    print(f"| decision | CPU | {' | '.join(seen)} |")
    print("| --- " * (len(seen) + 2) + "|")
    for i, ((_, c), p) in enumerate(zip(profiled, per, strict=True), WARMUP_ROUNDS + 1):
        print(f"| {i} | {1000 * c:.0f} | {' | '.join(f'{1000 * p.get(n, 0.0):.0f}' for n in seen)} |")


def child_command(args: argparse.Namespace, label: str, gpus: int, jobs: int, tenants: int,
                  variation: bool = False) -> list[str]:
    return [sys.executable, __file__, "--child", label, "--gpus", str(gpus), "--jobs", str(jobs),
            "--rounds", str(args.rounds), "--seed", str(args.seed), "--budget", str(args.budget),
            "--child-tenants", str(tenants), *(["--child-variation"] if variation else [])]


def tenants_main(args: argparse.Namespace, sizes: list[int]) -> None:
    """Each configuration without and with ``--tenants`` queues, in this run; a section of its own."""
    rows: list[dict] = []
    for label in args.configs.split(","):
        for g in sizes:
            jobs = args.jobs or int(1.2 * g)
            pair = []
            for tenants in (0, args.tenants):
                out = subprocess.run(child_command(args, label, g, jobs, tenants), capture_output=True, text=True,
                                     timeout=args.budget + 300)
                if out.returncode != 0:
                    sys.exit(f"{label} at {g} GPUs with {tenants} queues failed: {out.stderr.strip()[-500:]}")
                pair.append(json.loads(out.stdout.strip().splitlines()[-1]))
            base, with_q = pair
            row = {"label": label, "gpus": g, "jobs": jobs, "tenants": args.tenants,
                   "active_jobs_median": with_q["active_jobs_median"], "median_s": base["median_s"],
                   "median_queues_s": with_q["median_s"], "p95_s": base["p95_s"], "p95_queues_s": with_q["p95_s"],
                   "rounds": min(base["rounds"], with_q["rounds"]),
                   "cut_short": base["cut_short"] or with_q["cut_short"]}
            rows.append(row)
            print(f"{label:32s} {g:6d} GPUs  median {row['median_s']:.4f} s -> {row['median_queues_s']:.4f} s with "
                  f"{args.tenants} queues (p95 {row['p95_s']:.4f} -> {row['p95_queues_s']:.4f})", flush=True)
    if args.json or args.jobs:
        return
    # A partial rerun (--configs, --gpus) replaces only its own rows; each row keeps the date and
    # command of the run that measured its pair (the ratio is always within one run).
    command = ".venv/bin/python benchmarks/round_latency.py " + " ".join(sys.argv[1:])
    store = ROOT / "docs" / "benchmarks" / "round_latency_tenants.json"
    rows = merge_rows(store, rows, lambda r: (r["label"], r["gpus"], r["tenants"]),
                      {"date": today(), "command": command})
    rows = [r for r in rows if r["tenants"] == args.tenants]
    rows.sort(key=lambda r: (CONFIGS.index(r["label"]) if r["label"] in CONFIGS else len(CONFIGS), r["gpus"]))
    store.write_text(json.dumps(rows, indent=1) + "\n")
    commands = sorted({r["command"] for r in rows}, key=lambda c: min(r["date"] for r in rows if r["command"] == c))
    lines = [
        f"## Decision latency with {args.tenants} tenant queues (`benchmarks/round_latency.py --tenants`)",
        "",
        f"Command{'s' if len(commands) > 1 else ''}: {'; '.join(f'`{c}`' for c in commands)} (each row's own in "
        f"`docs/benchmarks/round_latency_tenants.json`). Machine: {machine()}. Updated: {today()}.",
        f"Same evolving state as the section above; each row is measured twice in one run, without "
        f"queues and with {args.tenants} tenant queues (10 organisations x {max(args.tenants // 10, 1)} teams, "
        "guarantees splitting the cluster evenly, jobs spread over the teams by a skewed Dirichlet(0.5) draw so "
        "that some teams borrow and others lend). Median and p95 of one whole decision over the row's "
        f"rounds (its `rounds` column) after {WARMUP_ROUNDS} warm-up rounds.",
        "",
        "| configuration | GPUs | active jobs (median) | median, one queue (s) | median, queues (s) | ratio | "
        "p95, one queue (s) | p95, queues (s) | rounds | measured |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(f"| {r['label']} | {r['gpus']} | {r['active_jobs_median']} | {r['median_s']:.4f} | "
                     f"{r['median_queues_s']:.4f} | {r['median_queues_s'] / r['median_s']:.2f}x | {r['p95_s']:.4f} | "
                     f"{r['p95_queues_s']:.4f} | {r['rounds']}{' (cut short by budget)' if r['cut_short'] else ''} | "
                     f"{r['date']} |")
    update_section("round_latency_tenants", "\n".join(lines))
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, action="append", help="cluster size(s); default 256,1024,4096,16384")
    ap.add_argument("--jobs", type=int, help="active jobs at start (default 1.2 x GPUs)")
    ap.add_argument("--rounds", type=int, default=20, help="measured rounds (after warm-up)")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=float, default=240.0, help="seconds per configuration and size")
    ap.add_argument("--json", action="store_true", help="print one JSON object per configuration and size")
    ap.add_argument("--tenants", type=int, default=0, help="also measure each configuration with this many "
                    "tenant queues (written to a section of its own)")
    ap.add_argument("--report", action="store_true", help="rewrite the section from the stored rows; run nothing")
    ap.add_argument("--profile", action="store_true", help="profile one configuration at one size (pyinstrument): "
                    "top frames and each step's time per decision; writes nothing")
    ap.add_argument("--top", type=int, default=20, help="frames listed by --profile")
    ap.add_argument("--interval", type=float, default=0.001, help="sampling interval of --profile (s)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-tenants", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--child-variation", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--learned", action="store_true", help="measure each configuration with the oracle's and "
                    "with learned throughputs, interleaved decision by decision in one process (written to a "
                    "section of its own)")
    ap.add_argument("--repeat", type=int, default=3, help="--learned: repeats (one process each); the ratio is the "
                    "median over all decision pairs of all repeats")
    ap.add_argument("--child-paired", help=argparse.SUPPRESS)
    ap.add_argument("--child-learned-first", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    sizes = args.gpus or SIZES
    if args.child:
        g = sizes[0]
        print(json.dumps(measure(args.child, g, args.jobs or int(1.2 * g), args.rounds, args.seed, args.budget,
                                 args.child_tenants, variation=args.child_variation)))
        return
    if args.child_paired:
        from _paired_latency import paired

        g = sizes[0]
        print(json.dumps(paired(args.child_paired, g, args.jobs or int(1.2 * g), args.rounds, args.seed, args.budget,
                                args.child_learned_first, WARMUP_ROUNDS)))
        return
    if args.learned:
        from _paired_latency import learned_main

        learned_main(args, sizes, WARMUP_ROUNDS)
        return
    if args.profile:
        profile_main(args, sizes)
        return
    if args.tenants:
        tenants_main(args, sizes)
        return
    rows: list[dict] = []
    for label in [] if args.report else args.configs.split(","):
        for g in sizes:
            jobs = args.jobs or int(1.2 * g)
            cmd = child_command(args, label, g, jobs, 0)
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.budget + 300)
            except subprocess.TimeoutExpired:
                row = {"gpus": g, "jobs": jobs, "label": label, "error": f"no result within {args.budget + 300:.0f} s"}
                rows.append(row)
                print(json.dumps(row), flush=True)
                break
            if out.returncode != 0:
                row = {"gpus": g, "jobs": jobs, "label": label,
                       "error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
                rows.append(row)
                print(json.dumps(row), flush=True)
                break
            row = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(json.dumps(row) if args.json else
                  f"{label:32s} {g:6d} GPUs {jobs:6d} jobs  median {row['median_s']:.4f} s  "
                  f"p95 {row['p95_s']:.4f} s  ({row['rounds']} rounds)", flush=True)
            if row["over_limit"]:
                break
    if args.json or args.jobs:
        return  # ad-hoc runs (other job counts, JSON output) do not touch BENCHMARKS.md
    # Keep every measured row in a JSON file, so a partial rerun (--gpus, --configs) replaces only
    # its own rows; each row carries the date and command of its own run.
    store = ROOT / "docs" / "benchmarks" / "round_latency.json"
    store.parent.mkdir(parents=True, exist_ok=True)
    saved = json.loads(store.read_text()) if store.exists() else []
    stamp = {"date": today(), "command": ".venv/bin/python benchmarks/round_latency.py " + " ".join(sys.argv[1:])}
    for r in rows:
        r.update(stamp)
    def key(r: dict) -> tuple[str, int]:
        return r.get("label") or f"{r['policy']}:{r['placement']}{'+packing' if r['packing'] else ''}", r["gpus"]

    fresh = {key(r) for r in rows}
    rows = sorted([r for r in saved if key(r) not in fresh] + rows,
                  key=lambda r: (CONFIGS.index(key(r)[0]) if key(r)[0] in CONFIGS else 99, r["gpus"]))
    store.write_text(json.dumps(rows, indent=1) + "\n")
    ok = [r for r in rows if "error" not in r]
    png = ROOT / "docs" / "benchmarks" / "round_latency.png"
    plot(ok, png)
    lines = [
        "## Decision latency at scale (`benchmarks/round_latency.py`)",
        "",
        f"Command: `.venv/bin/python benchmarks/round_latency.py --rounds 20` (rows re-measured alone name their "
        f"own command in `docs/benchmarks/round_latency.json`). Machine: {machine()}. Updated: {today()}.",
        "Each row: median and p95 wall time of one whole decision over the evolving rounds of its `rounds` "
        f"column after {WARMUP_ROUNDS} warm-up rounds (cold start shown apart); ~1.2 active jobs per GPU; "
        "8 GPUs a node. "
        "Plot: `docs/benchmarks/round_latency.png`.",
        "",
        "Wall times on a shared machine also hold the time other processes had the cores; the CPU median "
        "(the process's own time, recorded from issue 17 on) does not.",
        "",
        "| configuration | GPUs | active jobs (median) | median (s) | p95 (s) | max (s) | cold start (s) | rounds "
        "| CPU median (s) | peak memory (MB) | measured |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['label']} | {r['gpus']} | {r['jobs']} | not measured: {r['error']} | | | | | | | |")
            continue
        label = f"{r['policy']}:{r['placement']}{'+packing' if r['packing'] else ''}"
        note = " (stopped: a round took over 60 s)" if r["over_limit"] else (" (cut short by budget)"
                                                                             if r["cut_short"] else "")
        lines.append(f"| {label} | {r['gpus']} | {r['active_jobs_median']} | {r['median_s']:.4f} | {r['p95_s']:.4f} "
                     f"| {r['max_s']:.4f} | {r['cold_start_s']:.4f} | {r['rounds']}{note} "
                     f"| {_opt(r, 'cpu_median_s', '.4f')} | {_opt(r, 'peak_mb', '.0f')} | {r['date']} |")
    lines += ["", *growth_lines(ok)]
    update_section("round_latency", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
