"""``tesserae server``: the store, the controller thread and the HTTP API in one process.

Start-up: decide who jobs run as (``isolation``: a job account, a user map, or the explicit
same-user mode), make the executor (``make_executor``: the local one discovers GPUs from NVML or
``--virtual-gpus``; the Ray one checks its address), build the scheduler core exactly as the
simulator does (``config.build_scheduler``) as soon as the executor knows its cluster, let the
executor reach its cluster (``prepare``), bind the socket (before anything is written, so a port
clash leaves no half-made state folder), open the state folder (``state_folder``: private, locked,
the store checked then opened, the admin token created on first start), open the executor on it,
write ``STATE/server.json`` (url and pid), then run the controller loop in a background thread and
uvicorn in the main thread; once it answers, ``--ready-file`` is written (``detach``). SIGTERM or
Ctrl-C stop the server; job processes keep running and the next server adopts them.

With ``--executor ray`` the GPUs are those of a Ray cluster's nodes (``--ray-address``, or a local
Ray instance started here), discovered once the state folder is locked; see ``ray.executor``. With
``--executor slurm`` they are those of a Slurm partition (``--slurm-partition``), whose slurm.conf
settings are checked before anything is written; see ``slurm.executor``.
``make_executor`` is the one place that names executor kinds: a new kind is added there.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tesserae.config import RunSpec
from tesserae.core.errors import InputError

if TYPE_CHECKING:
    from tesserae.runtime.api.app import AppExtension
    from tesserae.runtime.controller.loop import Controller
    from tesserae.runtime.executor.protocol import Executor
    from tesserae.runtime.store.state_folder import StateFolder

#: The server's thread switch interval (Python's default: 5 ms). A request's thread lets the GIL go at
#: every store call and system call (25 or so for a submission); while a decision or a prediction
#: computes in another thread, each time it wants it back it waited up to the whole interval, which
#: added up to 100 ms and more per submission (issue 27). At 1 ms the computing thread hands it over
#: sooner; it costs that thread a few microseconds a switch.
SWITCH_INTERVAL = 0.001

EXECUTORS = ("local", "ray", "slurm")
THROUGHPUTS = ("learned", "profile")


class _Shutdown(Exception):
    pass


@dataclass(frozen=True)
class ServerOptions:
    state: Path
    run: RunSpec
    executor: str = "local"
    ray_address: str | None = None
    ray_lease: float | None = None
    master_ports: str | None = None
    slurm_partition: str | None = None
    slurm_lease: float | None = None
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
    #: Server config file (YAML): tenant queues (``queues``, ``default_queue``); see ``tesserae.queue_file``.
    config: Path | None = None
    #: Restart cost (s) the start-time predictions charge per (re)start (``runtime.controller.prediction``).
    predict_restart_seconds: float = 1.0
    #: What the scheduler decides on: ``learned`` (each job's rates learned from its progress, the profile
    #: as their prior: ``runtime.controller.learning``) or ``profile`` (the profile's rates by job type).
    throughputs: str = "learned"
    #: Admission limits (``runtime.api.budgets``): most active jobs per user, most waiting jobs (0: none).
    max_jobs_per_user: int = 10_000
    max_queued_jobs: int = 100_000
    #: The GPU health probe of the local executor (``executor.gpu_health``): ``auto`` (``nvidia-smi``
    #: for NVML's GPUs, where it is on PATH), ``off``, or the command to run; and its interval (s).
    gpu_health: str = "auto"
    gpu_health_interval: float = 30.0


def say(msg: str) -> None:
    """One line of the server's log (stderr; ``STATE/server.log`` when detached), stamped with the local
    time and its UTC offset to the millisecond, so an operator can line it up with other logs."""
    stamp = datetime.now().astimezone().isoformat(timespec="milliseconds")
    print(f"{stamp} tesserae server: {msg}", file=sys.stderr, flush=True)


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
    """The run's policy is one a real server can run, and it and the placement take their options."""
    from tesserae.config import build_placement, build_policy
    from tesserae.scheduling.base import policy_names

    accepted = policy_names(include_oracles=False)
    if run.policy not in accepted:
        choose = f"the server accepts {', '.join(accepted)}"
        if run.policy in policy_names():
            raise InputError(f"policy '{run.policy}' needs the true durations of jobs, which a real server does not "
                             f"know; use it in the simulator only ({choose})", field="policy")
        raise InputError(f"unknown policy '{run.policy}'; {choose}", field="policy")
    build_policy(run)
    build_placement(run)


def _check_options(opts: ServerOptions) -> tuple[str, ...]:
    """The option checks that need nothing but the options; returns the checked ``--pass-env`` names."""
    from tesserae.runtime.job.env import check_pass_env

    if opts.executor not in EXECUTORS:
        raise InputError(f"unknown executor '{opts.executor}'; choose local, ray or slurm", field="executor")
    for name, value in (("ray-address", opts.ray_address), ("ray-lease", opts.ray_lease)):
        if opts.executor != "ray" and value is not None:
            raise InputError(f"--{name} goes with --executor ray", field=name)
    if opts.executor == "local" and opts.master_ports is not None:
        raise InputError("--master-ports goes with --executor ray or slurm", field="master-ports")
    for name, value in (("slurm-partition", opts.slurm_partition), ("slurm-lease", opts.slurm_lease)):
        if opts.executor != "slurm" and value is not None:
            raise InputError(f"--{name} goes with --executor slurm", field=name)
    if opts.executor == "slurm":
        if not opts.slurm_partition:
            raise InputError("--executor slurm needs --slurm-partition NAME: the partition Tesserae schedules",
                             field="slurm-partition")
        if opts.virtual_gpus is not None:
            raise InputError("--virtual-gpus does not go with --executor slurm: the GPUs are the partition's GRES",
                             field="virtual-gpus")
    if opts.throughputs not in THROUGHPUTS:
        raise InputError(f"--throughputs is learned or profile, not '{opts.throughputs}'", field="throughputs")
    if opts.cgroups not in ("auto", "off"):
        raise InputError(f"--cgroups is auto or off, not '{opts.cgroups}'", field="cgroups")
    try:
        pass_env = check_pass_env(opts.pass_env)
    except ValueError as e:
        raise InputError(str(e), field="pass-env") from None
    check_policy(opts.run)
    return pass_env


def make_executor(opts: ServerOptions, pass_env: tuple[str, ...]) -> Executor[Any]:
    """The executor ``--executor`` names, checked as far as it can be before anything is written."""
    from tesserae.runtime.executor.node_net import parse_ports

    if opts.executor == "slurm":
        from tesserae.runtime.slurm.executor import SlurmExecutor
        from tesserae.runtime.slurm.lease import DEFAULT_LEASE as SLURM_LEASE

        try:
            ports = None if opts.master_ports is None else parse_ports(opts.master_ports)
        except ValueError as e:
            raise InputError(str(e), field="master-ports") from None
        assert opts.slurm_partition is not None
        return SlurmExecutor(opts.slurm_partition, grace_seconds=opts.grace_seconds, log=say, pass_env=pass_env,
                             lease_seconds=opts.slurm_lease or SLURM_LEASE, master_ports=ports)
    if opts.executor == "ray":
        from tesserae.runtime.ray.executor import RayExecutor

        if opts.ray_address is not None and opts.virtual_gpus is not None:
            raise InputError("--virtual-gpus declares the GPUs of a local Ray instance; on a Ray cluster declare "
                             "them per node with 'ray start --num-gpus N'", field="virtual-gpus")
        from tesserae.runtime.ray.lease import DEFAULT_LEASE

        try:
            ports = None if opts.master_ports is None else parse_ports(opts.master_ports)
        except ValueError as e:
            raise InputError(str(e), field="master-ports") from None
        ray = RayExecutor(opts.ray_address, virtual_gpus=opts.virtual_gpus, gpu_type=opts.gpu_type,
                          grace_seconds=opts.grace_seconds, log=say, pass_env=pass_env,
                          lease_seconds=opts.ray_lease or DEFAULT_LEASE, split_logs=True, master_ports=ports)
        ray.check_address()
        choice = opts.gpu_health.strip()
        if choice != "off":  # each node's agent probes its own GPUs; auto: those NVML named, with nvidia-smi
            import shlex

            ray.probe_gpu_health(["nvidia-smi"] if choice == "auto" else shlex.split(choice),
                                 opts.gpu_health_interval, virtual=choice != "auto")
        return ray
    from tesserae.runtime.executor.gpus import discover
    from tesserae.runtime.local.executor import LocalExecutor

    gpus = discover(opts.virtual_gpus, opts.gpu_type)
    return LocalExecutor(gpus, detect_cgroups=opts.cgroups == "auto", pass_env=pass_env, log=say,
                         health=_gpu_health(opts, [g.device for g in gpus], gpus[0].virtual))


def _gpu_health(opts: ServerOptions, devices: list[str], virtual: bool) -> Any:
    """The local executor's GPU health probe (``--gpu-health``), or None."""
    import shlex
    import shutil

    from tesserae.runtime.executor.gpu_health import GpuHealth

    choice = opts.gpu_health.strip()
    if choice == "off" or (choice == "auto" and virtual):
        return None
    if choice == "auto":
        if shutil.which("nvidia-smi") is None:
            say("GPU health: nvidia-smi is not on PATH; GPUs are not probed (--gpu-health COMMAND to name it)")
            return None
        choice = "nvidia-smi"
    command = shlex.split(choice)
    if not command or shutil.which(command[0]) is None:
        raise InputError(f"--gpu-health: '{choice}' is not a command on PATH (give nvidia-smi's path, or off)",
                         field="gpu-health")
    return GpuHealth(command, devices, opts.gpu_health_interval, log=say)


def _scheduler(cluster: Any, model: Any, opts: ServerOptions) -> Any:
    """The scheduler of the options, built to check them before anything is written (with learned
    throughputs the server builds the real one once the store is open: the estimator lives there)."""
    from tesserae.config import build_scheduler
    from tesserae.profiles.learned import RateEstimator
    from tesserae.runtime.controller.learning import class_model

    if opts.throughputs == "learned":
        return build_scheduler(cluster, class_model(RateEstimator(cluster.gpu_types, model)), opts.run)
    return build_scheduler(cluster, model, opts.run)


def serve(opts: ServerOptions, extensions: Sequence[AppExtension] = ()) -> None:
    """Run the server until SIGTERM or Ctrl-C; ``extensions`` are mounted on its HTTP app after the API
    (the dashboard: the ``tesserae server`` command passes it)."""
    from tesserae.config import build_scheduler
    from tesserae.profiles.loader import load_profile
    from tesserae.runtime.api.app import create_app
    from tesserae.runtime.api.budgets import Budgets
    from tesserae.runtime.controller import tenancy as tenancy_mod
    from tesserae.runtime.controller.learning import RuntimeLearning, class_model
    from tesserae.runtime.controller.loop import Controller, ControllerConfig
    from tesserae.runtime.controller.prediction import Predictor
    from tesserae.runtime.job import isolation as iso
    from tesserae.runtime.store.state_folder import SERVER_FILE, ensure_admin_token, open_state, write_private
    from tesserae.scheduler_learned import LearnedScheduler

    pass_env = _check_options(opts)
    executor = make_executor(opts, pass_env)
    model = load_profile(opts.profile)
    # Built as soon as the executor knows its cluster (the local one does now): a bad option leaves nothing behind.
    scheduler = None if executor.cluster is None else _scheduler(executor.cluster, model, opts)
    if executor.cluster is not None and opts.config is not None:  # a bad config file is refused before anything
        tenancy_mod.check_config(opts.config, executor.cluster.gpus_by_type, opts.run.policy)  # is written
    isolation = iso.resolve(job_user=opts.job_user, user_map=opts.user_map, same_user=opts.insecure_same_user,
                            executor=opts.executor)
    executor.prepare()
    # Nothing is written before the port is ours: a clash leaves no half-made state folder behind.
    sock = _bind(opts.host, opts.port)
    try:
        folder = open_state(opts.state, isolation, job_root=opts.job_root, new_store=opts.new_store,
                            log_to_state=opts.log_to_state)
    except BaseException:
        sock.close()
        raise
    state = folder.path
    if folder.skipped_ids is not None:
        first, last = folder.skipped_ids
        say(f"warning: job folders hold ids up to {last} that the store does not know (it lost its latest writes, "
            f"e.g. a write-ahead log moved aside): job ids {first}..{last} are skipped, new jobs start at {last + 1}")
    ensure_admin_token(folder, say)
    executor.open(state, folder.store)
    cluster = executor.cluster
    assert cluster is not None  # an executor that finds no GPU refuses to open
    learning = None
    if opts.throughputs == "learned":  # the estimator as the store kept it, on this cluster's GPU types
        learning = RuntimeLearning.open(folder.store, cluster, model, opts.run.round_seconds, say)
        scheduler = LearnedScheduler.wrap(build_scheduler(cluster, class_model(learning.estimator), opts.run),
                                          learning.estimator)
    elif scheduler is None:
        scheduler = build_scheduler(cluster, model, opts.run)
    tenancy = tenancy_mod.start_queues(folder.store, cluster.gpus_by_type, opts.run, opts.config)
    controller = Controller(folder.store, executor, scheduler, cluster, state,
                            ControllerConfig(round_seconds=opts.run.round_seconds, grace_seconds=opts.grace_seconds,
                                             event_driven=opts.event_driven, tick=opts.tick),
                            log=say, isolation=isolation, job_root=folder.job_root,
                            reserve_job_id=folder.sidecar.reserve, profile=model, learning=learning)
    controller.tenancy = tenancy
    controller.predictor = Predictor(opts.run.round_seconds, opts.event_driven,
                                     restart_seconds=opts.predict_restart_seconds, run=opts.run)
    if tenancy is not None and tenancy.tree is not None:
        tenancy.install(scheduler)
        say(f"{len(tenancy.tree.leaves)} tenant queue(s) from {tenancy.source}")
    info: dict[str, Any] = {
        "executor": executor.name, "policy": opts.run.policy, "placement": opts.run.placement,
        "packing": opts.run.packing, "round_seconds": opts.run.round_seconds, "event_driven": opts.event_driven,
        "grace_seconds": opts.grace_seconds, "profile": model.name, "throughputs": opts.throughputs,
        "cluster": cluster.describe(),
        **executor.info(),
    }
    controller.on_cluster_change = lambda c: info.update(cluster=c.describe())
    budgets = Budgets(max_jobs_per_user=opts.max_jobs_per_user or None, max_queued_jobs=opts.max_queued_jobs or None)
    app = create_app(controller, info, max_body=opts.max_body_bytes, extensions=extensions, budgets=budgets)
    host, port = sock.getsockname()[:2]
    url_host = f"[{host}]" if ":" in str(host) else host
    url = f"http://{url_host}:{port}"
    write_private(state / SERVER_FILE, json.dumps({"url": url, "pid": os.getpid(), "started": time.time()}))
    _say_started(opts, controller, folder, isolation)
    _run(opts, app, controller, sock, folder, url)


def _say_started(opts: ServerOptions, controller: Controller, folder: StateFolder, isolation: Any) -> None:
    executor, cluster = controller.executor, controller.cluster
    gpus = executor.gpus
    kind = "virtual" if gpus[0].virtual else "NVML"
    if not _is_loopback(opts.host):
        say(f"warning: listening on {opts.host} without TLS: tokens cross the network in clear text; put a TLS "
            "proxy in front")
    location = executor.describe_location()
    where = "" if location is None else f" on {location}"
    say(f"state {folder.path}; {len(gpus)} {kind} GPU(s) ({cluster.describe()}){where}; policy {opts.run.policy}, "
        f"placement {opts.run.placement}; rounds of {opts.run.round_seconds:g} s"
        f"{', event-driven' if opts.event_driven else ''}; {opts.throughputs} throughputs")
    tracking = executor.describe_tracking()
    say(f"{isolation.describe()}; job folders in {folder.job_root}{'' if tracking is None else f'; {tracking}'}")
    if isolation.same_user and os.geteuid() == 0:
        say("warning: jobs run as root (--insecure-same-user): any job can take over this machine")


def _run(opts: ServerOptions, app: Any, controller: Controller, sock: socket.socket, folder: StateFolder,
         url: str) -> None:
    """The controller in a thread, uvicorn here, until SIGTERM or Ctrl-C; then the clean-up."""
    import uvicorn

    from tesserae.runtime.detach import watch_ready
    from tesserae.runtime.store.state_folder import SERVER_FILE

    sys.setswitchinterval(SWITCH_INTERVAL)
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
        watch_ready(server, opts.ready_file, url)
    say(f"listening on {url} (API docs at {url}/docs)")
    farewell = "stopped"
    try:
        server.run(sockets=[sock])
    except _Shutdown:
        pass
    finally:
        stop.set()
        thread.join(timeout=30)
        farewell = controller.executor.close()
        folder.store.close()
        with contextlib.suppress(FileNotFoundError):
            (folder.path / SERVER_FILE).unlink()
        if opts.ready_file is not None:
            with contextlib.suppress(FileNotFoundError):
                opts.ready_file.unlink()
        os.close(folder.lock_fd)
    say(farewell)
    if failed:
        raise SystemExit(1)
