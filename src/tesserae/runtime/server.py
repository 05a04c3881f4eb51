"""``tesserae server``: the store, the controller thread and the HTTP API in one process.

Start-up: decide who jobs run as (``isolation``: a job account, a user map, or the explicit
same-user mode), discover GPUs (NVML or ``--virtual-gpus``), build the scheduler core exactly as
the simulator does (``sim.runner.build_scheduler``), bind the socket (before anything is written,
so a port clash leaves no half-made state folder), make the state folder private (0700, files
0600), lock it (one server per folder), check the store before opening it (``store_integrity``),
create the admin token on first start (``STATE/admin.token``, mode 0600, written atomically),
write ``STATE/server.json`` (url and pid), then run the controller loop in a background thread
and uvicorn in the main thread; once it answers, ``--ready-file`` is written (``--detach`` waits
for that). SIGTERM or Ctrl-C stop the server; job processes keep running and the next server
adopts them.

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
    from tesserae.runtime.executor import Executor

ADMIN_TOKEN_FILE = "admin.token"
SERVER_FILE = "server.json"
LOCK_FILE = "server.lock"
LOG_FILE = "server.log"
READY_FILE = "server.ready"
DETACHED_VAR = "TESSERAE_DETACHED"


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
    job_user: str | None = None
    user_map: Path | None = None
    insecure_same_user: bool = False
    job_root: Path | None = None
    pass_env: tuple[str, ...] = ()
    cgroups: str = "auto"
    max_body_bytes: int = 1 << 20
    ready_file: Path | None = None
    new_store: bool = False
    log_to_state: bool = False


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
    """Write ``path`` (mode 0600) atomically: a reader sees nothing or all of it, never a part."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


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


def _open_store(state: Path, job_root: Path, new_store: bool) -> tuple[Any, Any]:
    """The checked store (``store_integrity``) and its ``store.json``, written or brought up to date."""
    from tesserae.runtime.store import DB_NAME, Store
    from tesserae.runtime.store_integrity import ID_BLOCK, SIDECAR, Sidecar, preflight

    db = state / DB_NAME
    check = preflight(state, db, [job_root] if job_root != state / "jobs" else [], new_store=new_store)
    sidecar = check.sidecar
    store = Store(db, store_id=sidecar.store_id if (check.fresh and sidecar is not None and not new_store) else None,
                  first_job_id=check.first_id)
    if sidecar is None or sidecar.store_id != store.store_id:
        start = max(store.next_job_id() - 1, sidecar.reserved_ids if sidecar else 0)
        sidecar = Sidecar(state / SIDECAR, store.store_id, time.time(), start + ID_BLOCK)
        sidecar.write()
    sidecar.reserve(store.next_job_id())
    return store, sidecar


def _watch_ready(server: Any, path: Path, url: str) -> None:
    """Write ``path`` (url and pid, atomically) once uvicorn accepts requests."""
    def wait() -> None:
        while not server.started:
            if server.should_exit:
                return
            time.sleep(0.01)
        _write_private(path, json.dumps({"url": url, "pid": os.getpid()}) + "\n")

    threading.Thread(target=wait, name="tesserae-ready", daemon=True).start()


def detach_server(state: Path, ready_file: Path | None, timeout: float = 300.0) -> None:
    """``tesserae server --detach``: this same command, started in the background in a session of its
    own; returns once it answers requests (its admin token is written by then), or exits with its
    error. Its output goes to ``STATE/server.log``."""
    import subprocess

    argv = [a for a in sys.argv[1:] if a != "--detach"]
    if ready_file is None:
        ready_file = state.expanduser().resolve() / READY_FILE
        argv += ["--ready-file", str(ready_file)]
    with contextlib.suppress(FileNotFoundError):
        ready_file.unlink()
    proc = subprocess.Popen([sys.executable, "-m", "tesserae.cli", *argv], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, DETACHED_VAR: "1"})
    deadline = time.monotonic() + timeout
    while True:
        try:
            doc = json.loads(ready_file.read_text())
            break
        except (OSError, ValueError):
            pass
        if proc.poll() is not None:
            out = proc.stdout.read().decode(errors="replace") if proc.stdout is not None else ""
            sys.stderr.write(out)
            raise SystemExit(proc.returncode or 1)
        if time.monotonic() > deadline:
            raise InputError(f"the server (pid {proc.pid}) did not answer within {timeout:g} s; see "
                             f"{state / LOG_FILE}")
        time.sleep(0.05)
    if proc.stdout is not None:
        proc.stdout.close()
    say(f"running in the background (pid {doc['pid']}), listening on {doc['url']}; log in {state / LOG_FILE}; "
        f"stop it with 'kill {doc['pid']}'")


def serve(opts: ServerOptions) -> None:
    import uvicorn

    from tesserae.profiles.loader import load_profile
    from tesserae.runtime import isolation as iso
    from tesserae.runtime.api import create_app
    from tesserae.runtime.controller import Controller, ControllerConfig
    from tesserae.runtime.gpus import discover
    from tesserae.runtime.job_env import check_pass_env
    from tesserae.runtime.local_executor import LocalExecutor
    from tesserae.sim.runner import build_scheduler

    if opts.executor not in ("local", "ray"):
        raise InputError(f"unknown executor '{opts.executor}'; choose local or ray", field="executor")
    if opts.executor == "local" and opts.ray_address is not None:
        raise InputError("--ray-address goes with --executor ray", field="ray-address")
    if opts.cgroups not in ("auto", "off"):
        raise InputError(f"--cgroups is auto or off, not '{opts.cgroups}'", field="cgroups")
    try:
        pass_env = check_pass_env(opts.pass_env)
    except ValueError as e:
        raise InputError(str(e), field="pass-env") from None
    check_policy(opts.run)
    executor: Executor[Any]
    if opts.executor == "ray":
        from tesserae.runtime.ray_executor import RayExecutor

        if opts.ray_address is not None and opts.virtual_gpus is not None:
            raise InputError("--virtual-gpus declares the GPUs of a local Ray instance; on a Ray cluster declare "
                             "them per node with 'ray start --num-gpus N'", field="virtual-gpus")
        ray_executor = RayExecutor(opts.ray_address, virtual_gpus=opts.virtual_gpus, gpu_type=opts.gpu_type,
                                   grace_seconds=opts.grace_seconds, log=say, pass_env=pass_env)
        ray_executor.check_address()
        executor = ray_executor
    else:
        executor = LocalExecutor(discover(opts.virtual_gpus, opts.gpu_type), detect_cgroups=opts.cgroups == "auto",
                                 pass_env=pass_env, log=say)
    model = load_profile(opts.profile)
    # Built as soon as the executor knows its cluster (the local one does now): a bad option leaves nothing behind.
    scheduler = None if executor.cluster is None else build_scheduler(executor.cluster, model, opts.run)

    isolation = iso.resolve(job_user=opts.job_user, user_map=opts.user_map, same_user=opts.insecure_same_user,
                            executor=opts.executor)
    executor.prepare()
    # Nothing is written before the port is ours: a clash leaves no half-made state folder behind.
    sock = _bind(opts.host, opts.port)
    try:
        state = opts.state.resolve()
        os.umask(0o077)  # the store, its log, tokens: the server's files are private
        try:
            state.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as e:
            raise InputError(f"cannot create the state folder: {e.strerror}", path=str(state)) from None
        iso.secure_state(state)
        lock_fd = _lock(state)
    except BaseException:
        sock.close()
        raise
    try:
        if opts.log_to_state:  # --detach: from here on the server's output goes to STATE/server.log
            log_fd = os.open(state / LOG_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
            os.close(log_fd)
        job_root = (opts.job_root.resolve() if opts.job_root else iso.default_job_root(state, isolation))
        iso.prepare_job_root(job_root, state, isolation)
        store, sidecar = _open_store(state, job_root, opts.new_store)
    except BaseException:
        sock.close()
        os.close(lock_fd)
        raise
    token_path = state / ADMIN_TOKEN_FILE
    if not store.has_admin():
        _write_private(token_path, store.create_token("admin", admin=True, label="created at first start") + "\n")
        say(f"created the admin token in {token_path} (mode 0600); "
            f"export TESSERAE_TOKEN=$(cat {token_path})")
    elif token_path.exists():
        say(f"admin token in {token_path}")
    executor.open(state, store)
    cluster, gpus = executor.cluster, executor.gpus
    assert cluster is not None  # an executor that finds no GPU refuses to open
    if scheduler is None:
        scheduler = build_scheduler(cluster, model, opts.run)
    controller = Controller(store, executor, scheduler, cluster, state,
                            ControllerConfig(round_seconds=opts.run.round_seconds, grace_seconds=opts.grace_seconds,
                                             event_driven=opts.event_driven, tick=opts.tick),
                            isolation=isolation, job_root=job_root, reserve_job_id=sidecar.reserve)
    kind = "virtual" if gpus[0].virtual else "NVML"
    info: dict[str, Any] = {
        "executor": executor.name, "policy": opts.run.policy, "placement": opts.run.placement,
        "packing": opts.run.packing, "round_seconds": opts.run.round_seconds, "event_driven": opts.event_driven,
        "grace_seconds": opts.grace_seconds, "profile": model.name, "cluster": cluster.describe(),
        **executor.info(),
    }
    controller.on_cluster_change = lambda c: info.update(cluster=c.describe())
    app = create_app(controller, info, max_body=opts.max_body_bytes)
    host, port = sock.getsockname()[:2]
    url_host = f"[{host}]" if ":" in str(host) else host
    url = f"http://{url_host}:{port}"
    _write_private(state / SERVER_FILE, json.dumps({"url": url, "pid": os.getpid(), "started": time.time()}))
    if not _is_loopback(opts.host):
        say(f"warning: listening on {opts.host} without TLS: tokens cross the network in clear text; put a TLS "
            "proxy in front")
    location = executor.describe_location()
    where = "" if location is None else f" on {location}"
    say(f"state {state}; {len(gpus)} {kind} GPU(s) ({cluster.describe()}){where}; policy {opts.run.policy}, placement "
        f"{opts.run.placement}; rounds of {opts.run.round_seconds:g} s"
        f"{', event-driven' if opts.event_driven else ''}")
    tracking = executor.describe_tracking()
    say(f"{isolation.describe()}; job folders in {job_root}{'' if tracking is None else f'; {tracking}'}")
    if isolation.same_user and os.geteuid() == 0:
        say("warning: jobs run as root (--insecure-same-user): any job can take over this machine")

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
    if opts.ready_file is not None:
        _watch_ready(server, opts.ready_file, url)
    say(f"listening on {url} (API docs at {url}/docs)")
    farewell = "stopped"
    try:
        server.run(sockets=[sock])
    except _Shutdown:
        pass
    finally:
        stop.set()
        thread.join(timeout=30)
        farewell = executor.close()
        store.close()
        with contextlib.suppress(FileNotFoundError):
            (state / SERVER_FILE).unlink()
        if opts.ready_file is not None:
            with contextlib.suppress(FileNotFoundError):
                opts.ready_file.unlink()
        os.close(lock_fd)
    say(farewell)
    if failed:
        raise SystemExit(1)
