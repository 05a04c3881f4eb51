"""The API and the dashboard with 100,000 stored jobs (issue 27, point 6).

    .venv/bin/python benchmarks/api_scale.py [--jobs 100000] [--waiting 20000] [--held 10000] [--requests 200]

Fills a fresh state folder with ``--jobs`` jobs of 50 users (``--waiting`` queued, ``--held`` held, the
rest ended: completed, failed or cancelled), the way the server stores them (each id claimed with its
folder), then starts ``tesserae server`` on it (4 virtual GPUs, FIFO, 60 s rounds, event-driven) and
measures, one request at a time, p50 and p99 of:

- ``GET /v1/jobs/{id}`` (a random job of the user asking), ``GET /v1/jobs?limit=50``,
  ``GET /v1/jobs?user=X&state=queued`` (admin token: one user's waiting jobs, first page),
  ``GET /v1/cluster`` (GPUs and the head of the queue),
  ``GET /ui/queue`` (the dashboard's queue page, first page, admin), ``POST /v1/jobs`` (a submit of a
  held job, then of a job that may run: each of those is an event, so decisions and predictions run
  beside the submissions that follow);
- the idle server's CPU (its process' user + system time over 10 s, nobody asking);
- a flood: one user's 8 threads asking ``GET /v1/jobs?limit=50`` as fast as they can (most get a 429:
  the user's budget) while another user's ``GET /v1/jobs/{id}`` is timed; its p99 against the same
  requests just before. Three times with the flooding client in a process of its own (as it would be
  on another machine; here it still shares the 2 cores), then once from threads of the timing
  process, to show what a client sharing the timing client's GIL adds.

A user's list requests are sent at most 8 a second (its budget allows 10).

Writes its table to BENCHMARKS.md (section ``api_scale``) with the machine, its load and the date.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing as mp
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from _report import machine, today, update_section
from tesserae.runtime.job import isolation as iso
from tesserae.runtime.job.paths import JobPaths
from tesserae.runtime.launch import procs
from tesserae.runtime.store.job_ids import JobIds
from tesserae.runtime.store.state_folder import ensure_admin_token, open_state

USERS = 50
#: Seconds after the last request before the idle server's CPU is measured (the predictions the last
#: decisions started run up to 2 s each).
SETTLE = 10.0
#: Seconds between one user's list requests: within its budget of 10 a second (``runtime.api.budgets``).
LIST_PACE = 0.125
TARGETS = {"GET /v1/jobs/{id}": 50.0, "GET /v1/jobs?limit=50": 100.0, "GET /ui/queue": 300.0,
           "POST /v1/jobs": 100.0, "POST /v1/jobs (queued: decisions run)": 100.0}
COLUMNS = ("user", "name", "job_type", "num_gpus", "command", "shell", "env", "nproc", "iterations", "state",
           "submit_time", "first_start", "last_start", "last_stop", "finish_time", "progress", "attained",
           "executed", "held", "exit_code", "reason", "request_hash")
FILL_SQL = f"INSERT INTO jobs (id, {', '.join(COLUMNS)}) VALUES (?, {', '.join('?' * len(COLUMNS))})"


def fill(state: Path, n: int, waiting: int, held: int, seed: int = 0) -> dict[str, list[int]]:
    """A state folder with ``n`` jobs; returns each user's job ids."""
    folder = open_state(state, iso.Isolation(same_user=True), job_root=None, new_store=False, log_to_state=False)
    ensure_admin_token(folder, lambda msg: None)
    store = folder.store
    ids = JobIds(JobPaths(folder.path, folder.job_root, lambda msg: None), folder.sidecar.reserve)
    rng = random.Random(seed)
    kinds = ["ended"] * (n - waiting - held) + ["queued"] * waiting + ["held"] * held
    rng.shuffle(kinds)
    now = time.time()
    start = now - 30 * 86400
    by_user: dict[str, list[int]] = {}
    batch: list[tuple[Any, ...]] = []
    with store.tx():
        next_id = store.next_job_id()
        for i, kind in enumerate(kinds):
            job_id = ids.claim(next_id)
            next_id = job_id + 1
            user = f"user{rng.randrange(USERS):02d}"
            submit = start + (now - start - 3600) * i / n
            gpus = rng.choice((1, 1, 1, 2, 4))
            if kind == "ended":
                run = rng.uniform(60, 36000)
                end_state = rng.choice(("completed", "completed", "completed", "failed", "cancelled"))
                row = (user, f"train-{i}", "generic", gpus, json.dumps(["sleep", "1"]), 0, "{}", 1, None, end_state,
                       submit, submit + 30, submit + 30, submit + 30 + run, submit + 30 + run, 100.0, run * gpus,
                       run, 0, 0 if end_state == "completed" else 1, "", "")
            else:
                row = (user, f"train-{i}", "generic", gpus, json.dumps(["sleep", "100000"]), 0, "{}", 1, None,
                       "queued", submit, None, None, submit, None, 0.0, 0.0, 0.0, int(kind == "held"), None, "", "")
            batch.append((job_id, *row))
            by_user.setdefault(user, []).append(job_id)
            if len(batch) >= 5000:
                store._conn.executemany(FILL_SQL, batch)
                batch.clear()
        if batch:
            store._conn.executemany(FILL_SQL, batch)
        ids.sync()
    store.close()
    os.close(folder.lock_fd)
    return by_user


def start_server(state: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str, Path]:
    log = state.parent / "server.log"
    ready = state.parent / "ready.json"
    ready.unlink(missing_ok=True)  # a previous run's
    cmd = [sys.executable, "-m", "tesserae.cli", "server", "--state", str(state), "--virtual-gpus", "4",
           "--port", "0", "--policy", "fifo", "--round-seconds", "60", "--insecure-same-user",
           "--ready-file", str(ready), *extra]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERAE_")}
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited:\n{log.read_text()}")
        with contextlib.suppress(OSError, ValueError, KeyError):
            doc = json.loads(ready.read_text())
            if doc.get("pid") == proc.pid:
                return proc, doc["url"], log
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server did not answer within 600 s")


def token_for(state: Path, user: str) -> str:
    cmd = [sys.executable, "-m", "tesserae.cli", "token", "create", "--user", user, "--state", str(state)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return out.stdout.strip().split()[-1]


def timed(client: httpx.Client, method: str, url: Any, n: int, expect: int = 200, pace: float = 0.0,
          **kw: Any) -> np.ndarray:
    """Milliseconds of ``n`` requests, one after the other (``url`` may be a function of i), at least
    ``pace`` seconds apart (a user's list requests stay within its budget: ``runtime.api.budgets``)."""
    out = []
    for i in range(n):
        target = url(i) if callable(url) else url
        if pace and out:
            time.sleep(max(0.0, pace - out[-1] / 1000))
        t0 = time.perf_counter()
        r = client.request(method, target, **kw)
        out.append((time.perf_counter() - t0) * 1000)
        if r.status_code != expect:
            raise SystemExit(f"{method} {target}: {r.status_code} {r.text[:300]}")
    return np.asarray(out)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cpu(pid: int, seconds: float = 10.0) -> float:
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - c0) / (time.monotonic() - t0)


#: Threads of the flooding client, and how many times the flood is measured (each against its own
#: baseline taken just before).
FLOOD_THREADS, FLOOD_REPEATS = 8, 3


def flood_threads(url: str, token: str, stop: Any, counts: Any, threads: int = FLOOD_THREADS) -> None:
    """``threads`` threads asking ``GET /v1/jobs?limit=50`` as ``token`` until ``stop`` is set; ``counts``
    gets (requests, refused with 429)."""
    def one() -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
            while not stop.is_set():
                refused = c.get("/v1/jobs", params={"limit": 50}).status_code == 429
                with counts.get_lock():
                    counts[0] += 1
                    counts[1] += int(refused)

    pool = [threading.Thread(target=one) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()


def flooded(url: str, token: str, timing: Any, separate: bool) -> dict[str, Any]:
    """``timing()`` (a victim's requests, timed) while one user floods the server: from a process of its
    own (``separate``: as a flooding client on another machine would, though it still shares this
    machine's cores) or from threads of this process (whose GIL the timing client then shares)."""
    ctx = mp.get_context("spawn")
    stop, counts = ctx.Event(), ctx.Array("q", 2)
    args = (url, token, stop, counts)
    runner: Any = ctx.Process(target=flood_threads, args=args) if separate else threading.Thread(
        target=flood_threads, args=args)
    runner.start()
    time.sleep(1.0 if not separate else 3.0)  # the flood under way (a new process first imports httpx)
    try:
        with counts.get_lock():
            before = (counts[0], counts[1])
        cpu0 = cpu_seconds(runner.pid) if separate else math.nan
        t0 = time.monotonic()
        during = timing()
        elapsed = time.monotonic() - t0
        client_cpu = (cpu_seconds(runner.pid) - cpu0) / elapsed if separate else math.nan
        with counts.get_lock():
            sent, refused = counts[0] - before[0], counts[1] - before[1]
    finally:
        stop.set()
        runner.join()
    return {"during": during, "flood_requests": sent, "refused": refused, "seconds": elapsed,
            "client_cpu": client_cpu}


def measure(url: str, state: Path, admin: str, by_user: dict[str, list[int]], n: int, pid: int
            ) -> dict[str, Any]:
    rng = random.Random(1)
    users = sorted(by_user)
    victim, flooder = users[0], users[1]
    tokens = {u: token_for(state, u) for u in (victim, flooder)}
    results: dict[str, Any] = {}
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens[victim]}"}, timeout=120) as c, \
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=120) as a:
        mine = by_user[victim]
        timed(c, "GET", "/v1/jobs?limit=50", 3)  # warm up
        results["GET /v1/jobs/{id}"] = timed(c, "GET", lambda i: f"/v1/jobs/{rng.choice(mine)}", n)
        results["GET /v1/jobs?limit=50"] = timed(c, "GET", "/v1/jobs?limit=50", n, pace=LIST_PACE)
        results["GET /v1/jobs?user=X&state=queued"] = timed(
            a, "GET", f"/v1/jobs?user={victim}&state=queued&limit=50", n)
        results["GET /v1/cluster"] = timed(c, "GET", "/v1/cluster", max(20, n // 5), pace=LIST_PACE)
        a.cookies.clear()
        login = a.get("/ui/login")
        csrf = _csrf(login.text)
        r = a.post("/ui/login", data={"token": admin, "csrf": csrf}, follow_redirects=False)
        if r.status_code not in (302, 303):
            raise SystemExit(f"dashboard login: {r.status_code} {r.text[:200]}")
        results["GET /ui/queue"] = timed(a, "GET", "/ui/queue", max(20, n // 5))
        held = {"command": ["sleep", "100000"], "gpus": 1, "hold": True}
        results["POST /v1/jobs"] = timed(c, "POST", "/v1/jobs", n, expect=201, json=held)
        time.sleep(SETTLE)
        # A job that may run: its arrival is an event, so each submission starts a decision (paced:
        # ``controller.loop.DECISION_SHARE``) and a prediction, which run beside the next submissions.
        queued = {"command": ["sleep", "100000"], "gpus": 1}
        results["POST /v1/jobs (queued: decisions run)"] = timed(c, "POST", "/v1/jobs", n, expect=201, json=queued)
        time.sleep(SETTLE)  # the decisions and predictions the submissions caused end first
        results["idle server CPU (share of a core)"] = idle_cpu(pid)
        floods = []
        for separate in [True] * FLOOD_REPEATS + [False]:
            base = timed(c, "GET", lambda i: f"/v1/jobs/{rng.choice(mine)}", n)
            run = flooded(url, tokens[flooder], lambda: timed(c, "GET", lambda i: f"/v1/jobs/{rng.choice(mine)}", n),
                          separate)
            floods.append({**run, "base": base, "separate": separate})
            time.sleep(2.0)
        results["flood"] = floods
    return results


def _csrf(html: str) -> str:
    marker = 'name="csrf" value="'
    at = html.find(marker)
    return "" if at < 0 else html[at + len(marker):html.index('"', at + len(marker))]


def table(results: dict[str, Any], args: argparse.Namespace, load: str, fill_s: float, start_s: float) -> str:
    lines = ["## The API with 100,000 stored jobs (`benchmarks/api_scale.py`)", "",
             f"Machine: {machine()}. Date: {today()}. Load average before the run: {load}.",
             f"Command: `.venv/bin/python benchmarks/api_scale.py --jobs {args.jobs} --waiting {args.waiting} "
             f"--held {args.held} --requests {args.requests}`. {args.jobs:,} jobs of {USERS} users "
             f"({args.waiting:,} waiting, {args.held:,} held, the rest ended); 4 virtual GPUs, FIFO, 60 s rounds. "
             f"Filling the store took {fill_s:.1f} s, the server's first start on it {start_s:.1f} s. Requests one "
             "at a time over HTTP on 127.0.0.1 (client in the same machine).", "",
             "| measure | p50 (ms) | p99 (ms) | target | met |", "|---|---:|---:|---:|:-:|"]
    for name, ms in results.items():
        if not isinstance(ms, np.ndarray):
            continue
        p50, p99 = np.percentile(ms, 50), np.percentile(ms, 99)
        target = TARGETS.get(name)
        check = "" if target is None else ("yes" if p99 <= target else "**no**")
        lines.append(f"| {name} | {p50:.1f} | {p99:.1f} | {'' if target is None else f'<= {target:g}'} | {check} |")
    idle = results["idle server CPU (share of a core)"]
    lines.append(f"| idle server CPU | {idle * 100:.1f}% of a core | | <= 5% | {'yes' if idle <= 0.05 else '**no**'} |")
    lines += ["", f"Flood: one user's {FLOOD_THREADS} threads send `GET /v1/jobs?limit=50` as fast as they can "
              "(past its budget, each is refused with 429) while another user's `GET /v1/jobs/{id}` is timed; its "
              "p99 against the same requests just before (target: within 2x). The flooding client runs on this "
              "machine's 2 cores too, beside the server and the timing client.", "",
              "| flooding client | its CPU (cores) | flood requests | refused | seconds | p50 before / during (ms) | "
              "p99 before / during (ms) | p99 ratio | met |", "|---|---:|---:|---:|---:|---:|---:|---:|:-:|"]
    for f in results["flood"]:
        b99, d99 = np.percentile(f["base"], 99), np.percentile(f["during"], 99)
        where = "own process" if f["separate"] else "threads of the timing process (shares its GIL)"
        cpu = "" if math.isnan(f["client_cpu"]) else f"{f['client_cpu']:.2f}"
        lines.append(f"| {where} | {cpu} | {f['flood_requests']:,} | {f['refused']:,} | {f['seconds']:.1f} | "
                     f"{np.percentile(f['base'], 50):.1f} / {np.percentile(f['during'], 50):.1f} | "
                     f"{b99:.1f} / {d99:.1f} | {d99 / b99:.2f}x | {'yes' if d99 <= 2 * b99 else '**no**'} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--waiting", type=int, default=20_000)
    ap.add_argument("--held", type=int, default=10_000)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--keep", type=Path, default=None, help="Build the state folder here and keep it.")
    ap.add_argument("--no-write", action="store_true", help="Print the table, leave BENCHMARKS.md alone.")
    args = ap.parse_args()
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    root = args.keep or Path(tempfile.mkdtemp(prefix="tesserae-api-scale-"))
    state = root / "state"
    proc = None
    try:
        t0 = time.monotonic()
        if not (state / "tesserae.db").exists():
            by_user = fill(state, args.jobs, args.waiting, args.held)
            (root / "users.json").write_text(json.dumps(by_user))
        by_user = json.loads((root / "users.json").read_text())
        fill_s = time.monotonic() - t0
        t0 = time.monotonic()
        proc, url, _ = start_server(state)
        start_s = time.monotonic() - t0
        admin = (state / "admin.token").read_text().strip()
        results = measure(url, state, admin, by_user, args.requests, proc.pid)
        text = table(results, args, load, fill_s, start_s)
        print(text)
        if not args.no_write:
            update_section("api_scale", text)
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        procs.kill_pids(procs.pids_with_marker_prefix(str(state.resolve())))
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
