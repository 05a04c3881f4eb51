"""What keeping the learned throughputs in the store costs a server (issue 25, item 4).

    .venv/bin/python benchmarks/learned_store.py [--jobs 100,1000,5000] [--types 3] [--repeat 5]

With ``--throughputs learned`` the controller saves the estimator's state in the store after every
decision that took new reports (``RuntimeLearning.save``: ``to_state``, JSON, one row replaced) and
reads it back when it starts (``RuntimeLearning.open``: ``from_state``). For each size: that many
jobs, each measured alone on every GPU type and next to one partner (the state's worst case per
job short of its 16 partners), then the median CPU time of a save, of a load, of the refresh that
precedes a save, and the document's size. The decision time itself is ``round_latency.py --learned``'s.
Writes the ``learned_store`` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _report import machine, today, update_section
from tesserae.core.cluster import parse_cluster_spec
from tesserae.profiles.default_model import DefaultModel
from tesserae.runtime.controller.learning import RuntimeLearning
from tesserae.runtime.store.database import Store
from tesserae.runtime.store.learned import LearnedStates

TYPES = ("k80", "p100", "v100", "a100", "h100")


def one_size(n: int, types: int, repeat: int, folder: Path) -> dict[str, float]:
    cluster = parse_cluster_spec(",".join(f"4x8:{t}" for t in TYPES[:types]))
    store = Store(folder / f"s{n}.db")
    learning = RuntimeLearning.open(store, cluster, DefaultModel(), 60.0, lambda msg: None)
    est = learning.estimator
    rng = np.random.default_rng(n)
    learning.register((j, 1, f"model{j % 20}") for j in range(n))
    for j in range(n):
        for t in cluster.gpu_types:
            est.observe(j, float(rng.uniform(50, 500)) * 60, 60.0, t)
        est.observe(j, float(rng.uniform(20, 200)) * 60, 60.0, cluster.gpu_types[0], partner=(j + 1) % n)
    t0 = time.process_time()
    est.refresh()
    refresh = time.process_time() - t0
    saves, loads = [], []
    for _ in range(repeat):
        t0 = time.process_time()
        learning.save(1.0)
        saves.append(time.process_time() - t0)
        t0 = time.process_time()
        RuntimeLearning.open(store, cluster, DefaultModel(), 60.0, lambda msg: None)
        loads.append(time.process_time() - t0)
    found = LearnedStates(store).load()
    assert found is not None
    nbytes = len(json.dumps(found[1], separators=(",", ":")))
    store.close()
    return {"jobs": n, "types": types, "refresh_s": refresh, "save_s": float(np.median(saves)),
            "load_s": float(np.median(loads)), "bytes": nbytes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="100,1000,5000")
    parser.add_argument("--types", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(x) for x in args.jobs.split(",")]
    load = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            rows.append(one_size(n, args.types, args.repeat, Path(tmp)))
            print(rows[-1], file=sys.stderr)
    command = " ".join(["benchmarks/learned_store.py", *sys.argv[1:]])
    lines = [
        "## The learned throughputs in the store (`benchmarks/learned_store.py`)",
        "",
        f"Command: `{command}`. Machine: {machine()}. Updated: {today()}, load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start.",
        "A server with `--throughputs learned` saves the estimator's state after each decision that took new "
        "reports, and reads it back at start. Each job measured alone on every GPU type and next to one "
        f"partner; {args.types} GPU types; CPU medians of {args.repeat} saves and loads (a load includes "
        "rebuilding the estimator and its family fits).",
        "",
        "| jobs in the state | refresh before the save (s, one) | save (s) | load at start (s) | document (MB) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(f"| {r['jobs']} | {r['refresh_s']:.3f} | {r['save_s']:.3f} | {r['load_s']:.3f} | "
                     f"{r['bytes'] / 1e6:.2f} |")
    update_section("learned_store", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
