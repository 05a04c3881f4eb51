"""What a computing thread costs a request's threads in the same process, by thread switch interval.

    .venv/bin/python benchmarks/gil_handoff.py [--repeats 6] [--no-write]

Why the server sets ``sys.setswitchinterval(0.001)`` (``runtime/server.py``, issue 27): a request's
thread lets the GIL go at every store call and system call; while a decision or a prediction computes
in another thread (pure Python, as the controller does), each time the request's thread wants it back it
may wait the whole interval. Here, in a fresh process per measurement: one thread computes without
pause, and a "request" is handed to a worker thread (as uvicorn hands a route to its thread pool)
that runs 30 SQLite queries and two 1 ms waits (a submission's two fsyncs) and hands the answer
back, 10 ms apart; p50 and p99 of a request's time (at least 2 ms: the waits), at Python's default
interval (5 ms) and at 1 ms. Run on a busy machine the figures also hold the time the threads wait
for a core.

Writes its table to BENCHMARKS.md (section ``gil_handoff``) with the machine, its load and the date.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from _report import machine, today, update_section

BATCH, BATCHES = 30, 100
NOTES = {0.005: " (Python's default)", 0.001: " (the server)"}
CHILD = """
import json, queue, sqlite3, sys, threading, time
sys.setswitchinterval(float(sys.argv[1]))
batches, batch = int(sys.argv[2]), int(sys.argv[3])
db = sqlite3.connect(":memory:", check_same_thread=False)
db.execute("CREATE TABLE t (a)")
db.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(100)])
stop = False
def compute():
    x = 0
    while not stop:
        for i in range(1000):
            x += i
todo, done = queue.Queue(), queue.Queue()
def worker():
    while todo.get():
        for k in range(batch):
            db.execute("SELECT COUNT(*) FROM t").fetchone()
            if k in (batch // 2, batch - 1):
                time.sleep(0.001)  # the two fsyncs of a submission: 1 ms each
        done.put(True)
threading.Thread(target=compute, daemon=True).start()
threading.Thread(target=worker, daemon=True).start()
out = []
for _ in range(batches):
    t0 = time.perf_counter()
    todo.put(True)  # the event loop hands the request to a worker thread and waits for its answer
    done.get()
    out.append((time.perf_counter() - t0) * 1000)
    time.sleep(0.01)
stop = True
print(json.dumps(out))
"""


def batches(interval: float) -> list[float]:
    """Milliseconds of each batch, in a fresh process at switch interval ``interval``."""
    cmd = [sys.executable, "-c", CHILD, repr(interval), str(BATCHES), str(BATCH)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return list(json.loads(out.stdout))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--no-write", action="store_true", help="Print the table, leave BENCHMARKS.md alone.")
    args = ap.parse_args()
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    runs: dict[float, list[np.ndarray]] = {0.005: [], 0.001: [], 0.0005: []}
    for _ in range(args.repeats):  # alternated, so a change of the machine's load meets both alike
        for interval, got in runs.items():
            got.append(np.asarray(batches(interval)))
    lines = ["## A computing thread and a request's 30 store calls (`benchmarks/gil_handoff.py`)", "",
             f"Machine: {machine()}. Date: {today()}. Load average before the run: {load}. "
             f"Command: `.venv/bin/python benchmarks/gil_handoff.py --repeats {args.repeats}`. {args.repeats} "
             f"processes per interval, each {BATCHES} requests (a hand-off to a worker thread, {BATCH} SQLite queries "
             "and two 1 ms waits, the answer handed back) beside a thread computing in pure Python.", "",
             "| switch interval | p50 of a request (ms) | p99 per process (ms): median, max | p99 of all (ms) |",
             "|---|---:|---:|---:|"]
    for interval, got in runs.items():
        every = np.concatenate(got)
        p99s = [float(np.percentile(g, 99)) for g in got]
        lines.append(f"| {interval * 1000:g} ms{NOTES.get(interval, '')} | "
                     f"{np.percentile(every, 50):.1f} | {np.median(p99s):.1f}, {max(p99s):.1f} | "
                     f"{np.percentile(every, 99):.1f} |")
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        update_section("gil_handoff", text)


if __name__ == "__main__":
    main()
