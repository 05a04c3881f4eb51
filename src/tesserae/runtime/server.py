"""``tesserae server``: the store, the controller thread and the HTTP API in one process.

Start-up: discover GPUs (NVML or ``--virtual-gpus``), build the scheduler core exactly as the
simulator does (``sim.runner.build_scheduler``), lock the state folder (one server per folder),
open the store, create the admin token on first start (``STATE/admin.token``, mode 0600), bind
the socket, write ``STATE/server.json`` (url and pid), then run the controller loop in a
background thread and uvicorn in the main thread. SIGTERM or Ctrl-C stop the server; job
processes keep running and the next server adopts them.

With ``--executor ray`` the GPUs are those of a Ray cluster's nodes (``--ray-address``, or a local
Ray instance started here), discovered after the state folder is locked; see ``ray_executor``.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tesserae.core.errors import InputError
from tesserae.sim.runner import RunSpec

if TYPE_CHECKING:
    from tesserae.runtime.ray_executor import RayExecutor

ADMIN_TOKEN_FILE = "admin.token"
SERVER_FILE = "server.json"
LOCK_FILE = "server.lock"


class _Shutdown(Exception):
    pass


@dataclass(frozen=True)
class ServerOptions:
    state: Path
    run: RunSpec
    executor: str = "local"
    ray_address: str | None = None
    virtual_gpus: int | None = None
    gpu_type: str = "v100"
    host: str = "127.0.0.1"
    port: int = 8765
    grace_seconds: float = 30.0
    event_driven: bool = True
    profile: str | None = None
    tick: float = 0.05


def say(msg: str) -> None:
    print(f"tesserae server: {msg}", file=sys.stderr, flush=True)


def _lock(state: Path) -> int:
    fd = os.open(state / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        other = ""
        with contextlib.suppress(OSError, ValueError):
            other = f" (pid {json.loads((state / SERVER_FILE).read_text())['pid']})"
        raise InputError(f"another tesserae server is using {state}{other}; one server per state folder") from None
    return fd


def _write_private(path: Path, text: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _bind(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise InputError(f"cannot resolve host '{host}': {e.strerror}", field="host") from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as e:
        sock.close()
        raise InputError(f"cannot listen on {host}:{port}: {e.strerror}", field="port") from None
    sock.listen(1024)
    return sock


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_policy(run: RunSpec) -> None:
    from tesserae.placement.base import make_placement
    from tesserae.scheduling.base import make_policy, policy_names

    accepted = policy_names(include_oracles=False)
    if run.policy not in accepted:
        choose = f"the server accepts {', '.join(accepted)}"
        if run.policy in policy_names():
            raise InputError(f"policy '{run.policy}' needs the true durations of jobs, which a real server does not "
                             f"know; use it in the simulator only ({choose})", field="policy")
        raise InputError(f"unknown policy '{run.policy}'; {choose}", field="policy")
    make_policy(run.policy, **run.options())
    make_placement(run.placement, **run.options())


def serve(opts: ServerOptions) -> None:
    import uvicorn

    from tesserae.profiles.loader import load_profile
    from tesserae.runtime.api import create_app
    from tesserae.runtime.controller import Controller, ControllerConfig
    from tesserae.runtime.executor import LocalExecutor
    from tesserae.runtime.gpus import discover, machine_cluster
    from tesserae.runtime.store import DB_NAME, Store
    from tesserae.sim.runner import build_scheduler

    if opts.executor not in ("local", "ray"):
        raise InputError(f"unknown executor '{opts.executor}'; choose local or ray", field="executor")
    if opts.executor == "local" and opts.ray_address is not None:
        raise InputError("--ray-address goes with --executor ray", field="ray-address")
    ray_executor = None
    if opts.executor == "ray":
        from tesserae.runtime.ray_executor import RayExecutor

        if opts.ray_address is not None and opts.virtual_gpus is not None:
            raise InputError("--virtual-gpus declares the GPUs of a local Ray instance; on a Ray cluster declare "
                             "them per node with 'ray start --num-gpus N'", field="virtual-gpus")
        ray_executor = RayExecutor(opts.ray_address, virtual_gpus=opts.virtual_gpus, gpu_type=opts.gpu_type,
                                   grace_seconds=opts.grace_seconds, log=say)
        ray_executor.check_address()
    check_policy(opts.run)
    if ray_executor is None:
        cluster, gpus = machine_cluster(discover(opts.virtual_gpus, opts.gpu_type))
    model = load_profile(opts.profile)
    if ray_executor is None:
        scheduler = build_scheduler(cluster, model, opts.run)

    state = opts.state.resolve()
    try:
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as e:
        raise InputError(f"cannot create the state folder: {e.strerror}", path=str(state)) from None
    lock_fd = _lock(state)
    store = Store(state / DB_NAME)
    token_path = state / ADMIN_TOKEN_FILE
    if not store.has_admin():
        _write_private(token_path, store.create_token("admin", admin=True, label="created at first start") + "\n")
        say(f"created the admin token in {token_path} (mode 0600); "
            f"export TESSERAE_TOKEN=$(cat {token_path})")
    elif token_path.exists():
        say(f"admin token in {token_path}")
    executor: LocalExecutor | RayExecutor
    if ray_executor is not None:
        ray_executor.connect(state, store)
        assert ray_executor.cluster is not None
        cluster, gpus, executor = ray_executor.cluster, ray_executor.gpus, ray_executor
        scheduler = build_scheduler(cluster, model, opts.run)
    else:
        executor = LocalExecutor(gpus)
    controller = Controller(store, executor, scheduler, cluster, state,
                            ControllerConfig(round_seconds=opts.run.round_seconds, grace_seconds=opts.grace_seconds,
                                             event_driven=opts.event_driven, tick=opts.tick))
    kind = "virtual" if gpus[0].virtual else "NVML"
    info: dict[str, Any] = {
        "executor": executor.name, "policy": opts.run.policy, "placement": opts.run.placement,
        "packing": opts.run.packing, "round_seconds": opts.run.round_seconds, "event_driven": opts.event_driven,
        "grace_seconds": opts.grace_seconds, "profile": model.name, "cluster": cluster.describe(),
        "gpu_source": kind if ray_executor is None else f"ray ({kind})",
    }
    if ray_executor is not None:
        info["ray_address"] = opts.ray_address or "local"
        controller.on_cluster_change = lambda c: info.update(cluster=c.describe())
    app = create_app(controller, info)
    sock = _bind(opts.host, opts.port)
    host, port = sock.getsockname()[:2]
    url_host = f"[{host}]" if ":" in str(host) else host
    url = f"http://{url_host}:{port}"
    _write_private(state / SERVER_FILE, json.dumps({"url": url, "pid": os.getpid(), "started": time.time()}))
    if not _is_loopback(opts.host):
        say(f"warning: listening on {opts.host} without TLS: tokens cross the network in clear text; put a TLS "
            "proxy in front")
    where = "" if ray_executor is None else f" on {ray_executor.describe_address()}"
    say(f"state {state}; {len(gpus)} {kind} GPU(s) ({cluster.describe()}){where}; policy {opts.run.policy}, placement "
        f"{opts.run.placement}; rounds of {opts.run.round_seconds:g} s"
        f"{', event-driven' if opts.event_driven else ''}")

    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                            timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    stop = threading.Event()
    failed: list[BaseException] = []

    def loop() -> None:
        try:
            controller.run(stop)
        except BaseException as e:  # the controller must not die silently behind a live API
            failed.append(e)
            traceback.print_exc()
            say("the controller failed; shutting down (restart the server: it resumes from the store)")
            server.should_exit = True

    def shutdown(signum: int, frame: object) -> None:
        # uvicorn handles SIGINT/SIGTERM itself and re-raises the signal once it has stopped: end here
        # (instead of dying from the default handler) so that the clean-up below runs.
        raise _Shutdown

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    thread = threading.Thread(target=loop, name="tesserae-controller", daemon=True)
    thread.start()
    say(f"listening on {url} (API docs at {url}/docs)")
    try:
        server.run(sockets=[sock])
    except _Shutdown:
        pass
    finally:
        stop.set()
        thread.join(timeout=30)
        if ray_executor is not None:
            ray_executor.close()
        store.close()
        with contextlib.suppress(FileNotFoundError):
            (state / SERVER_FILE).unlink()
        os.close(lock_fd)
    if ray_executor is not None and ray_executor.started_ray:
        say("stopped, and the local Ray instance with it (running jobs were stopped; they resume from their "
            "checkpoints at the next start)")
    else:
        say("stopped (running jobs keep running; the next server adopts them)")
    if failed:
        raise SystemExit(1)
