"""Helpers of the runtime tests: real `tesserae server` subprocesses on 127.0.0.1, polling, the toy job.

Every server gets its own state folder and a free port (``--port 0``; the real port is read
from ``STATE/server.json``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tesserae.runtime.launch import lifetime, procs

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / "examples" / "toy_trainer.py"
PY = sys.executable
STATES = ("queued", "running", "preempted", "completed", "failed", "cancelled")


def wait_until(cond: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll ``cond`` until it returns something truthy; fail after exactly ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def wait_for(cond: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05, what: str = "condition") -> Any:
    """Poll ``cond`` until it returns something truthy; fail after ``timeout`` seconds.

    Timeouts are stretched by ``TESSERAE_TEST_TIMEOUT_SCALE`` (default 3): CI machines have two
    cores shared by two test workers, Ray and job processes, so a step that takes one second on an
    idle machine can take ten. A failing condition only fails later; a passing one is not slower.
    """
    return wait_until(cond, timeout * float(os.environ.get("TESSERAE_TEST_TIMEOUT_SCALE", "3")), what, interval)


def toy(iterations: int, spi: float = 0.05, *extra: str) -> list[str]:
    return [PY, str(TOY), "--iterations", str(iterations), "--seconds-per-iteration", str(spi), *extra]


@dataclass
class Server:
    state: Path
    proc: subprocess.Popen[bytes]
    url: str
    admin_token: str
    output: Path
    clients: list[httpx.Client] = field(default_factory=list)

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token or self.admin_token}"} if token != "" else {}
        c = httpx.Client(base_url=self.url, headers=headers, timeout=20.0)
        self.clients.append(c)
        return c

    def submit(self, command: list[str], gpus: int = 1, token: str | None = None, **extra: Any) -> int:
        r = self.client(token).post("/v1/jobs", json={"command": command, "gpus": gpus, **extra})
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def job(self, job_id: int, token: str | None = None) -> dict[str, Any]:
        r = self.client(token).get(f"/v1/jobs/{job_id}")
        assert r.status_code == 200, r.text
        return r.json()

    def cancel(self, job_id: int) -> dict[str, Any]:
        """Cancel a job (it must not have ended); its view as the API answered."""
        r = self.client().post(f"/v1/jobs/{job_id}/cancel")
        assert r.status_code == 200, r.text
        return r.json()

    def wait_state(self, job_id: int, states: str | tuple[str, ...], timeout: float = 30.0) -> dict[str, Any]:
        wanted = (states,) if isinstance(states, str) else states

        def check() -> dict[str, Any] | None:
            j = self.job(job_id)
            return j if j["state"] in wanted else None

        try:
            return wait_for(check, timeout, 0.1, f"job {job_id} to be {'/'.join(wanted)}")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.describe(job_id)}") from None

    def describe(self, job_id: int) -> str:
        """What a failed wait needs to be understood: the job's state, reason and last events, the tail of its
        log and of the server's output."""
        job = self.job(job_id)
        events = "\n".join(f"  {e['time']:.2f} {e['kind']} {json.dumps(e.get('detail'))}"
                           for e in job.get("events", [])[-15:])
        log = self.state / "jobs" / str(job_id) / "output.log"
        job_log = log.read_text(errors="replace")[-3000:] if log.exists() else "(none)"
        return (f"job {job_id} is {job['state']} ({job.get('reason')!r}); its last events:\n{events}\n"
                f"its log ends:\n{job_log}\nthe server's output ends:\n{self.log()[-4000:]}")

    def env(self, token: str | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERAE_")}
        env.update(TESSERAE_URL=self.url, TESSERAE_TOKEN=token or self.admin_token,
                   TESSERAE_CONFIG=str(self.state.parent / "no-such-config.toml"))
        return env

    def log(self) -> str:
        return self.output.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL the controller (its jobs keep running)."""
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        for c in self.clients:
            c.close()
        self.clients.clear()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_server(state: Path, *extra: str, gpus: int = 2, policy: str = "las", round_seconds: float = 1.0,
                 grace: float = 5.0, env: dict[str, str] | None = None, timeout: float = 30.0,
                 wait: bool = True, executor_args: tuple[str, ...] | None = None,
                 isolation: tuple[str, ...] = ("--insecure-same-user",)) -> Server:
    """Start a server; with ``wait`` (default) return once it answers /healthz.

    ``executor_args`` replaces ``--virtual-gpus GPUS`` (the Ray tests pass ``--executor ray ...``).
    ``isolation`` says who jobs run as: most tests run their toy jobs (which import this checkout's
    Python environment) as the test's own account; the isolation tests pass ``--job-user ...``.
    """
    state.mkdir(parents=True, exist_ok=True)
    info = state / "server.json"
    if info.exists():
        info.unlink()
    output = state.parent / f"{state.name}-server-{time.monotonic_ns()}.log"
    where = executor_args if executor_args is not None else ("--virtual-gpus", str(gpus))
    cmd = [PY, "-m", "tesserae.cli", "server", "--state", str(state), *where, "--host",
           "127.0.0.1", "--port", "0", "--round-seconds", str(round_seconds), "--policy", policy,
           "--grace-seconds", str(grace), *isolation, *extra]
    base = {k: v for k, v in os.environ.items() if not k.startswith("TESSERAE_")}
    with output.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**base, **(env or {})})

    def ready() -> str | None:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}:\n{output.read_text()}")
        try:
            doc = json.loads(info.read_text())
        except (OSError, ValueError):
            return None
        if doc.get("pid") != proc.pid:
            return None
        try:
            ok = httpx.get(doc["url"] + "/healthz", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return None
        return str(doc["url"]) if ok else None

    url = wait_for(ready, timeout, 0.05, "the server to listen") if wait else ""
    token = (state / "admin.token").read_text().strip()
    return Server(state, proc, url, token, output)


@contextlib.contextmanager
def servers_started_by(start: Callable[..., Server]) -> Iterator[Callable[..., Server]]:
    """A factory of servers (``start(state, *extra, **options)``); at the end every server it started is
    stopped and every job process of their state folders killed."""
    started: list[Server] = []

    def make(state: Path, *extra: str, **kw: Any) -> Server:
        s = start(state, *extra, **kw)
        started.append(s)
        return s

    try:
        yield make
    finally:
        for s in started:
            s.stop()
        for state in {s.state for s in started}:
            kill_jobs(state)


@contextlib.contextmanager
def running_server(state: Path, **options: Any) -> Iterator[Server]:
    """``start_server(state, **options)`` until the end of the block; then it and its jobs are stopped."""
    with servers_started_by(start_server) as make:
        yield make(state, **options)


def kill_jobs(state: Path) -> None:
    """SIGKILL every job process (launchers and their children) of a state folder; remove its cgroups."""
    pids = procs.pids_with_marker_prefix(str(state.resolve()))
    procs.kill_pids(pids)
    for pid in pids:
        wait_for(lambda p=pid: procs.start_ticks(p) is None, 10.0, 0.02, f"process {pid} to exit")
    base = lifetime.base_for(state.resolve())
    if base is not None:
        lifetime.remove_empty(base)


def runs_of(state: Path, job_id: int) -> list[dict[str, Any]]:
    """The toy trainer's record of its runs (start and end iteration of each)."""
    return json.loads((state / "jobs" / str(job_id) / "checkpoints" / "result.json").read_text())["runs"]


def toy_value(iterations: int) -> int:
    value = 0
    for it in range(iterations):
        value = (value * 31 + it + 1) % 1_000_003
    return value
