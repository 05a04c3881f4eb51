"""How fast the Ray executor notices a lost host, and that a job never runs twice meanwhile (issue 18).

    sudo .venv/bin/python benchmarks/ray_detection.py [--reps 5] [--leases 3,30] [--long-reps 2] [--no-gcs-partition]

Two hosts made of Linux network namespaces (``support.two_hosts``: a veth pair, own PID/mount/UTS namespaces, a
shared folder), Ray started on them with ``docs/ray.md``'s commands (token authentication), and a server on
host A with 2 s rounds, a 2 s grace period and ``--ray-lease L`` for each L of ``--leases`` (the
partitions at each lease, the raylet cases at the first). In each repetition a toy job
(2 GPUs, 20 ms iterations, a checkpoint every 20) runs on host B, then host B:

- **partition**: its link goes down (``ip link set veth-b down``) until the job runs on host A;
- **raylet crash**: its raylet gets SIGKILL (Ray and the agent go with it; the job's launcher stays);
- **clean stop**: its raylet gets SIGTERM (what ``ray stop`` sends it).

Measured from the event (wall clock, one machine): the end of host B's run as recorded (its exit
record; the run is closed as ``lost``) and the job ``resumed`` on host A (the server's events); the last
moment a process of the job was seen on host B and the first on host A (``/proc`` sampled every 10 ms);
their overlap, which must be 0. The baseline, in the same run: when Ray's GCS declared host B's node dead
(a driver on host A polling ``ray.nodes()``), which is what the executor waited for before issue 18. For
the partition the GCS takes about a minute, so it is measured once, in one more partition held until the
GCS gives up (``--no-gcs-partition`` skips it).

Needs root and ``ip netns``. Writes the ``ray_detection`` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from _report import machine, today, update_section
from support import two_hosts

#: A driver on host A that prints a line per change of a node's liveness in the GCS.
_GCS_WATCH = r"""
import json, sys, time, ray
ray.init(address="10.200.0.1:6379", logging_level="ERROR", log_to_driver=False)
seen = {}
print(json.dumps({"ready": time.time()}), flush=True)
while True:
    for n in ray.nodes():
        alive = bool(n["Alive"])
        if seen.get(n["NodeID"]) != alive:
            seen[n["NodeID"]] = alive
            print(json.dumps({"time": time.time(), "node": n["NodeID"], "ip": n["NodeManagerAddress"],
                              "alive": alive}), flush=True)
    time.sleep(0.05)
"""


class GcsWatch:
    """The GCS's view of the nodes' liveness, from a driver on host A (its output: JSON lines in a file)."""

    def __init__(self, hosts: two_hosts.Hosts, log: Path) -> None:
        self.log = log
        self.proc = hosts.popen("a", [sys.executable, "-c", _GCS_WATCH], env={"RAY_AUTH_MODE": "token"}, log=log)
        two_hosts.wait_until(lambda: any("ready" in r for r in self._records()), 120, "the GCS watcher to connect")

    def _records(self) -> list[dict[str, object]]:
        out = []
        with contextlib.suppress(OSError):
            for line in self.log.read_text().splitlines():
                with contextlib.suppress(ValueError):
                    doc = json.loads(line)
                    if isinstance(doc, dict):
                        out.append(doc)
        return out

    def dead_after(self, ip: str, since: float) -> float | None:
        """When the GCS first marked a node of ``ip`` dead at or after ``since``."""
        return next((float(r["time"]) for r in self._records()  # type: ignore[arg-type]
                     if r.get("ip") == ip and r.get("alive") is False and float(r["time"]) >= since), None)  # type: ignore[arg-type]

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


class ProcWatch:
    """Samples ``/proc`` every 10 ms: when a toy trainer process of job ``job`` was on each host."""

    def __init__(self, hosts: two_hosts.Hosts, job: int) -> None:
        self.hosts, self.needle = hosts, f"TESSERAE_JOB_ID={job}".encode()
        self.seen: dict[str, list[float]] = {"a": [], "b": []}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _has_job(self, host: str) -> bool:
        for pid in self.hosts.pids(host):
            with contextlib.suppress(OSError):
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                # The trainer itself (``python toy_trainer.py``), not its part launcher (whose arguments name it).
                if (len(argv) > 1 and argv[1].endswith(b"toy_trainer.py")
                        and self.needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")):
                    return True
        return False

    def _run(self) -> None:
        while not self._stop.is_set():
            for host in ("a", "b"):
                now = time.time()
                if self._has_job(host):
                    self.seen[host].append(now)
            time.sleep(0.01)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def last(self, host: str) -> float | None:
        return max(self.seen[host], default=None)

    def first(self, host: str, after: float) -> float | None:
        return min((t for t in self.seen[host] if t >= after), default=None)


@dataclass
class Sample:
    scenario: str
    lost: float
    resumed: float
    b_gone: float | None
    a_running: float | None
    overlap: float
    gcs_dead: float | None
    twice: bool


def one(hosts: two_hosts.Hosts, token: str, api: two_hosts.ServerClient, state: Path, gcs: GcsWatch, scenario: str,
        hold_for_gcs: bool = False) -> Sample:
    """One repetition of ``scenario`` on a fresh job on host B; host B is back in the view afterwards."""
    two_hosts.with_host_b(hosts, token, api)
    job = two_hosts.job_on_b(api, two_hosts.toy(100000, 0.02, "--checkpoint-every", "20"))
    watch = ProcWatch(hosts, job)
    time.sleep(0.5)
    t0 = time.time()
    if scenario == "partition":
        hosts.link("b", False)
        try:
            lost, resumed = two_hosts.requeued(api, job, t0, 300)
            if hold_for_gcs:
                two_hosts.wait_until(lambda: gcs.dead_after("10.200.0.2", t0), 300, "the GCS to declare B dead", 0.5)
            else:
                time.sleep(1.0)
        finally:
            hosts.link("b", True)
    elif scenario == "raylet crash":
        if not hosts.kill("b", "raylet"):
            raise RuntimeError("no raylet on host B")
        lost, resumed = two_hosts.requeued(api, job, t0, 300)
    else:
        if not hosts.kill("b", "raylet", signal.SIGTERM):
            raise RuntimeError("no raylet on host B")
        lost, resumed = two_hosts.requeued(api, job, t0, 300)
    if scenario != "partition" or hold_for_gcs:
        # The GCS's own verdict, the baseline (a crash: its health checks; a clean stop: the raylet says so).
        with contextlib.suppress(AssertionError):
            two_hosts.wait_until(lambda: gcs.dead_after("10.200.0.2", t0), 120, "the GCS to declare B dead", 0.2)
    time.sleep(1.0)
    watch.stop()
    b_last, a_first = watch.last("b"), watch.first("a", t0)
    twice = (state / "jobs" / str(job) / "checkpoints" / "overlap.log").exists()
    api.request("POST", f"/v1/jobs/{job}/cancel")
    two_hosts.wait_until(lambda: api.job(job)["state"] == "cancelled", 120, "the job to stop")
    if scenario != "partition" or hold_for_gcs:
        two_hosts.restart_worker(hosts, token)
    dead = gcs.dead_after("10.200.0.2", t0)
    return Sample(scenario, lost, resumed, None if b_last is None else b_last - t0,
                  None if a_first is None else a_first - t0,
                  0.0 if b_last is None or a_first is None else max(0.0, b_last - a_first),
                  None if dead is None else dead - t0, twice)


def _stats(xs: list[float]) -> str:
    if not xs:
        return "-"
    if len(xs) == 1:
        return f"{xs[0]:.2f}"
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


COLUMNS = ["host B", "reps", "end recorded (s)", "resumed on A (s)", "last process on B (s)", "first process on A (s)",
           "overlap (s)", "two runs at once", "GCS declared B dead (s)", "GCS / resumed"]


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def report(samples: list[Sample], leases: list[float], wall: float) -> str:
    cmd = "sudo .venv/bin/python benchmarks/ray_detection.py " + " ".join(sys.argv[1:])
    rows = []
    for scenario in dict.fromkeys(s.scenario for s in samples):
        ss = [s for s in samples if s.scenario == scenario]
        resumed = [s.resumed for s in ss]
        gcs = [s.gcs_dead for s in ss if s.gcs_dead is not None]
        ratio = (f"{statistics.median(gcs) / statistics.median(resumed):.1f}x" if gcs and len(gcs) == len(ss)
                 else "-")
        rows.append(_row([scenario, str(len(ss)), _stats([s.lost for s in ss]), _stats(resumed),
                          _stats([s.b_gone for s in ss if s.b_gone is not None]),
                          _stats([s.a_running for s in ss if s.a_running is not None]),
                          f"{max(s.overlap for s in ss):.3f}", str(sum(s.twice for s in ss)),
                          _stats(gcs) if gcs else "not yet when it healed", ratio]))
    return f"""## Losing a host under the Ray executor (`benchmarks/ray_detection.py`)

Command: `{cmd}`. Machine: {machine()}. Date: {today()}. Wall time {wall:.0f} s.

Two hosts made of network namespaces (a veth pair; `docs/ray.md`'s commands, token authentication), a
server on host A (`--round-seconds 2 --grace-seconds 2 --ray-lease L`, L = {", ".join(f"{x:g}" for x in leases)} s;
the raylet cases with the first), a toy job (2 GPUs, 20 ms iterations, a checkpoint every 20) on host B,
then host B is cut off (link down until the job runs on host A), its raylet SIGKILLed, or its raylet
stopped cleanly (SIGTERM, what `ray stop` sends). Seconds from that moment, median (min-max) over the
repetitions: the end of host B's run as recorded (its launcher's exit record; the run is closed as `lost`)
and the job `resumed` on host A (the server's events); the last process of the job seen on host B and the
first on host A (`/proc` every 10 ms); the overlap of the two copies (the largest over the repetitions;
must be 0); runs that the toy's run lock saw at once; and the baseline, when Ray's GCS declared host B's
node dead (what the executor waited for before issue 18), with its ratio to the restart on host A.

{_row(COLUMNS)}
{_row(["---"] * len(COLUMNS))}
{chr(10).join(rows)}

In a partition the shared folder stays reachable here, so the controller learns from host B's exit record
that its launcher stopped the job when its lease ran out (the lease runs from the last renewal host B got,
a poll or so before the cut); with the shared folder cut as well it waits the lease plus 2 s from the last
renewal it sent. A short partition heals before the GCS writes host B off, and host B rejoins by itself.
A crash: host B's launcher sees its agent die and records the part's end; the controller reads that record
as soon as a poll of host B is late (0.5 s), takes host B out of the view and restarts the job. A partition
row with a GCS figure but no ratio: the GCS wrote host B off in only some of its repetitions.
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="Repetitions of each scenario at the first lease.")
    parser.add_argument("--leases", default="3,30", help="The servers' --ray-lease values (seconds, comma-separated; "
                        "partitions at each, the raylet cases at the first).")
    parser.add_argument("--long-reps", type=int, default=2, help="Partitions at each lease but the first.")
    parser.add_argument("--no-gcs-partition", action="store_true", help="Skip the partition held until the GCS "
                        "declares host B dead (about a minute).")
    args = parser.parse_args()
    try:
        leases = [float(x) for x in args.leases.split(",")]
    except ValueError:
        parser.error(f"--leases: '{args.leases}' is not a list of seconds")
    why = two_hosts.usable()
    if why is not None:
        print(f"ray_detection: {why}", file=sys.stderr)
        return 2
    start = time.monotonic()
    samples: list[Sample] = []
    with tempfile.TemporaryDirectory(prefix="tsr18-bench-") as tmp, two_hosts.Hosts(Path(tmp) / "shared") as hosts:
        token = two_hosts.start_cluster(hosts)
        gcs = GcsWatch(hosts, Path(tmp) / "gcs.jsonl")
        try:
            for k, lease in enumerate(leases):
                plan = [("partition", False)] * (args.reps if k == 0 else args.long_reps)
                if k == 0:
                    plan += [("raylet crash", False)] * args.reps + [("clean stop", False)] * args.reps
                    if not args.no_gcs_partition:
                        plan.append(("partition", True))
                samples += run_plan(hosts, token, gcs, lease, plan)
        finally:
            gcs.close()
    text = report(samples, leases, time.monotonic() - start)
    update_section("ray_detection", text)
    print(text)
    return 1 if any(s.overlap > 0 or s.twice for s in samples) else 0


def run_plan(hosts: two_hosts.Hosts, token: str, gcs: GcsWatch, lease: float,
             plan: list[tuple[str, bool]]) -> list[Sample]:
    """The scenarios of ``plan`` against a server with ``--ray-lease lease``."""
    state = two_hosts.start_fast_server(hosts, f"bench-lease-{lease:g}", lease=lease)
    out = []
    try:
        with hosts.network_of("a") as call:
            api = two_hosts.server_client(hosts, "a", state, call)
            for i, (scenario, hold) in enumerate(plan):
                s = one(hosts, token, api, state, gcs, scenario, hold)
                s.scenario = (f"partition, held until the GCS gives up (lease {lease:g} s)" if hold
                              else f"partition (lease {lease:g} s)" if scenario == "partition" else scenario)
                out.append(s)
                print(f"[lease {lease:g}: {i + 1}/{len(plan)}] {s}", flush=True)
    finally:
        with contextlib.suppress(Exception):
            two_hosts.stop_server(hosts, state)
    return out


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
