"""The chaos harness: a real server whose controller is SIGKILLed at random (at fault points of the
write-ahead protocol and at random moments) and restarted on the same state folder, with the
jobs recording what they saw (``run_chaos``; ``benchmarks/chaos.py`` and ``tests/runtime/test_runtime_chaos.py``)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "examples" / "toy_trainer.py"
PY = sys.executable


@dataclass
class ChaosResult:
    jobs: int
    kills: int = 0
    fault_kills: int = 0
    timer_kills: int = 0
    completed: int = 0
    lost: list[int] = field(default_factory=list)
    duplicated: list[int] = field(default_factory=list)
    overlaps: list[int] = field(default_factory=list)
    double_booked: list[str] = field(default_factory=list)
    leftover_processes: int = 0
    restarts: int = 0
    adopted: int = 0
    lost_runs: int = 0
    runs: int = 0
    wall_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.overlaps or self.double_booked or self.leftover_processes)

    def summary(self) -> str:
        return (f"{self.kills} kills survived ({self.fault_kills} at fault points, {self.timer_kills} at random "
                f"moments), {self.jobs} jobs, {self.completed} completed, lost {len(self.lost)}, duplicated "
                f"{len(self.duplicated)}, two runs at once {len(self.overlaps)}, GPUs given twice "
                f"{len(self.double_booked)}, leftover processes {self.leftover_processes}; {self.runs} runs, "
                f"{self.adopted} adopted, {self.lost_runs} lost runs, {self.wall_seconds:.0f} s")


class _Server:
    """A `tesserae server` subprocess on the chaos state folder, with an optional fault rule."""

    def __init__(self, state: Path, gpus: int, fault: str, log: Path) -> None:
        cmd = [PY, "-m", "tesserae.cli", "server", "--state", str(state), "--virtual-gpus", str(gpus), "--host",
               "127.0.0.1", "--port", "0", "--policy", "las", "--round-seconds", "0.5", "--grace-seconds", "3",
               "--insecure-same-user"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERAE_")}
        if fault:
            env["TESSERAE_FAULT"] = fault
        with log.open("ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.state = state
        self.url = ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ready(self, timeout: float = 60.0) -> bool:
        """True once it answers; False if it died first (a fault point can kill it while it starts)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                return False
            try:
                doc = json.loads((self.state / "server.json").read_text())
                if doc.get("pid") == self.proc.pid and httpx.get(doc["url"] + "/healthz", timeout=2).status_code == 200:
                    self.url = doc["url"]
                    return True
            except (OSError, ValueError, KeyError, httpx.HTTPError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"the server did not start in {timeout:g} s")

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


def _all_ended(url: str, token: str, ids: list[int]) -> bool:
    try:
        r = httpx.get(url + "/v1/jobs", headers={"Authorization": f"Bearer {token}"}, timeout=10)
        r.raise_for_status()
    except httpx.HTTPError:
        return False
    states = {int(j["id"]): str(j["state"]) for j in r.json()["jobs"]}
    return all(states.get(i) in ("completed", "failed", "cancelled") for i in ids)


def run_chaos(workdir: Path, *, jobs: int, kills: int, seed: int, gpus: int = 2, fault_p: float = 0.03,
              kill_window: tuple[float, float] = (0.3, 2.5), timeout: float = 600.0,
              say: Any = None) -> ChaosResult:
    """The chaos run described in the module docstring, in ``workdir``; returns what it found."""
    from tesserae.runtime.launch import procs
    from tesserae.runtime.store.database import DB_NAME, Store

    say = say or (lambda msg: None)
    rng = random.Random(seed)
    state, completions, locks = workdir / "state", workdir / "completions.txt", workdir / "gpu-locks"
    log = workdir / "servers.log"
    result = ChaosResult(jobs=jobs)
    t0 = time.monotonic()
    server = _Server(state, gpus, "", log)
    if not server.ready():
        raise RuntimeError(f"the first server did not start; see {log}")
    token = (state / "admin.token").read_text().strip()
    ids = []
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        for i in range(jobs):
            n = rng.randint(20, 60)
            cmd = [PY, str(TOY), "--iterations", str(n), "--seconds-per-iteration", f"{rng.uniform(0.02, 0.05):.3f}",
                   "--checkpoint-every", "5", "--completions", str(completions), "--gpu-locks", str(locks)]
            r = http.post("/v1/jobs", json={"command": cmd, "gpus": rng.choice([1, 1, 2]), "iterations": n,
                                            "name": f"chaos-{i}"})
            r.raise_for_status()
            ids.append(int(r.json()["id"]))
    try:
        while True:
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"the jobs did not all end within {timeout:g} s; see {workdir}")
            if result.kills < kills:
                # Kill it at a random moment, unless a fault point kills it first (even while it starts).
                if server.alive() and (server.url or server.ready()):
                    until = time.monotonic() + rng.uniform(*kill_window)
                    while server.alive() and time.monotonic() < until:
                        time.sleep(0.02)
                if server.alive():
                    server.kill()
                    result.timer_kills += 1
                else:
                    result.fault_kills += 1
                result.kills += 1
                say(f"  kill {result.kills} ({result.fault_kills} at fault points)")
                result.restarts += 1
                fault = f"random:{seed}-{result.restarts}:{fault_p}" if result.kills < kills else ""
                server = _Server(state, gpus, fault, log)
                continue
            if not server.alive() or not (server.url or server.ready()):
                raise RuntimeError(f"the last server (no faults) died; see {log}")
            if _all_ended(server.url, token, ids):
                break
            time.sleep(0.2)
    finally:
        server.stop()
    result.wall_seconds = time.monotonic() - t0
    counts: dict[int, int] = {}
    if completions.exists():
        for line in completions.read_text().splitlines():
            counts[int(line.split()[0])] = counts.get(int(line.split()[0]), 0) + 1
    result.completed = sum(1 for i in ids if counts.get(i, 0) >= 1)
    result.lost = [i for i in ids if counts.get(i, 0) == 0]
    result.duplicated = [i for i in ids if counts.get(i, 0) > 1]
    result.overlaps = [i for i in ids if (state / "jobs" / str(i) / "checkpoints" / "overlap.log").exists()]
    booked = locks / "double-booked.log"
    result.double_booked = booked.read_text().splitlines() if booked.exists() else []
    result.leftover_processes = len(procs.pids_with_marker_prefix(str(state.resolve())))
    store = Store(state / DB_NAME, create=False)
    try:
        result.adopted = int(store.one("SELECT COUNT(*) FROM events WHERE kind='adopted'")[0])
        result.lost_runs = int(store.one("SELECT COUNT(*) FROM allocations WHERE outcome='lost'")[0])
        result.runs = int(store.one("SELECT COUNT(*) FROM allocations WHERE pid IS NOT NULL")[0])
    finally:
        store.close()
    return result
