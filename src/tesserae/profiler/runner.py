"""``tesserae profile``: measure the catalogue alone and in pairs, write a Tesserae profile.

Each measurement starts fresh worker processes (:mod:`tesserae.profiler.worker`): one per GPU of
each job, two jobs for a pair, forked by a zygote process that imported PyTorch once. The processes
warm up, then the parent releases them together (the barrier), each times a window of ``seconds``
and keeps training until every process has finished its window, so the two jobs of a pair contend
for the device over both windows.

Devices. On CUDA, a job on ``n`` GPUs uses devices 0..n-1 and a pair shares them; two processes
on one GPU share it through MPS when its control daemon runs (the processes connect to it on their
own), else by the driver's time-slicing. On a CPU, a "GPU" is ``cpu_threads`` cores (default 1):
GPU ``i`` is the ``i``-th slice of this process's usable cores, every worker on it is pinned there
and trains with that many threads, so the two jobs of a pair share the same cores. The profile then
names the CPU model as the GPU and ``cpu`` as the GPU type.

One iteration is one training step of the job: on ``n`` GPUs, one synchronous DDP step in which
each of the ``n`` processes trains on its own per-GPU batch (the catalogue's batch size).

Then, for each model, what a restart costs (:mod:`tesserae.profiler.restart`): fresh processes
that time start-up, checkpoint save and restore, ``restart_runs`` times (median). The processes come
from :mod:`tesserae.profiler.pool`; the profile is written by :mod:`tesserae.profiler.document`.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from tesserae.core.errors import InputError
from tesserae.profiler.catalogue import SIZES, size_settings
from tesserae.profiler.pool import PROBE_TIMEOUT_S, ProfilerError, WorkerPool, log_tail, read_log
from tesserae.profiler.restart import RestartError, RestartOutcome, measure_restart

GIB = 2**30
MPS_PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
MPS_DEFAULT_PIPE = "/tmp/nvidia-mps"


@dataclass(frozen=True)
class ProfileConfig:
    """What to measure. ``size`` 'auto' = 'full' on CUDA, 'small' on a CPU."""

    models: list[str]
    gpu_counts: list[int] = field(default_factory=lambda: [1])
    pairs: bool = False
    seconds: float = 10.0
    warmup: float | None = None  # default: min(5, seconds)
    size: str = "auto"
    device: str = "auto"  # auto, cuda or cpu
    cpu_threads: int = 1
    gpu_type: str | None = None  # default: derived from the GPU's name ('cpu' on a CPU)
    timeout: float = 600.0  # per measurement, after which its processes are killed
    restart_runs: int = 3  # fresh processes per model for the restart figures (0 = do not measure)
    checkpoint_dir: Path | None = None  # where restart measurements write checkpoints (default: a temp folder)

    @property
    def warmup_seconds(self) -> float:
        return min(5.0, self.seconds) if self.warmup is None else self.warmup


@dataclass(frozen=True)
class Device:
    """Where measurements run, and the provenance written into the profile."""

    kind: str  # 'cuda' or 'cpu'
    name: str
    driver: str
    torch_version: str
    gpu_type: str
    count: int  # usable "GPUs"
    cores: tuple[int, ...] = ()
    cpu_threads: int = 1
    sharing: str = "exclusive"  # for pairs: 'mps', 'time-slicing' or 'cpu time-sharing'

    def core_slice(self, index: int) -> list[int]:
        return list(self.cores[index * self.cpu_threads:(index + 1) * self.cpu_threads])

    def gpu_info(self, date: str | None = None) -> dict[str, str]:
        return {"name": self.name, "driver": self.driver, "torch_version": self.torch_version,
                "date": date or datetime.now(UTC).isoformat(timespec="seconds"), "gpu_type": self.gpu_type}


@dataclass(frozen=True)
class Measurement:
    """One run: ``models`` (one, or two for a pair) each on ``num_gpus`` GPUs of the device."""

    models: tuple[str, ...]
    num_gpus: int

    @property
    def is_pair(self) -> bool:
        return len(self.models) == 2

    def describe(self, device: Device) -> str:
        what = " + ".join(self.models)
        return f"{what} on {self.num_gpus} x {device.gpu_type}"


@dataclass
class JobOutcome:
    """One job of a measurement: its iterations/s (slowest rank) and peak memory per GPU."""

    model: str
    num_gpus: int
    throughput: float = 0.0
    memory_gb: float | None = None
    oom: bool = False
    skew: float | None = None
    parameters: int | None = None
    message: str = ""


@dataclass
class ProfileResult:
    device: Device
    config: ProfileConfig
    size: str
    solo: dict[tuple[str, int], JobOutcome] = field(default_factory=dict)
    pairs: dict[tuple[str, str, int], tuple[JobOutcome, JobOutcome]] = field(default_factory=dict)
    restart: dict[str, RestartOutcome] = field(default_factory=dict)
    date: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))


# ------------------------------------------------------------------------------------------ device
def torch_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def mps_running() -> bool:
    """Whether an MPS control daemon seems to run (its pipe directory has a control pipe)."""
    return Path(os.environ.get(MPS_PIPE_ENV, MPS_DEFAULT_PIPE), "control").exists()


def detect_device(config: ProfileConfig, info: dict[str, Any]) -> Device:
    """The device to measure on, from :func:`probe`'s answer and the options."""
    from tesserae.runtime.executor.gpus import gpu_type_of

    if "torch_version" not in info:
        raise InputError(f"PyTorch cannot be imported ({info.get('torch_error', 'not installed')}); "
                         "install the profiler's extra: pip install 'tesserae[profiler]'")
    want = config.device
    if want not in ("auto", "cuda", "cpu"):
        raise InputError(f"unknown device '{want}'; expected auto, cuda or cpu", field="device")
    if want == "cuda" and not info.get("cuda_count"):
        raise InputError("--device cuda: PyTorch sees no CUDA GPU here "
                         f"(PyTorch {info['torch_version']}, CUDA {info.get('cuda_version') or 'not built in'})",
                         field="device")
    if want != "cpu" and info.get("cuda_count"):
        names = info["cuda_names"]
        if len(set(names)) > 1:
            raise InputError(f"this machine mixes GPU models ({', '.join(sorted(set(names)))}); "
                             "set CUDA_VISIBLE_DEVICES to GPUs of one model and profile each model apart")
        gpu_type = (config.gpu_type or gpu_type_of(names[0])).lower()
        return Device("cuda", names[0], str(info.get("driver") or "unknown"), info["torch_version"], gpu_type,
                      int(info["cuda_count"]), sharing="mps" if mps_running() else "time-slicing")
    if config.cpu_threads < 1:
        raise InputError("--cpu-threads must be at least 1", field="cpu-threads")
    cores = tuple(info.get("cores") or range(os.cpu_count() or 1))
    return Device("cpu", info.get("cpu_name") or "unknown CPU", "n/a", info["torch_version"],
                  (config.gpu_type or "cpu").lower(), len(cores) // config.cpu_threads, cores=cores,
                  cpu_threads=config.cpu_threads, sharing="cpu time-sharing")


def resolve_size(config: ProfileConfig, device: Device) -> str:
    if config.size == "auto":
        return "full" if device.kind == "cuda" else "small"
    if config.size not in SIZES:
        raise InputError(f"unknown size '{config.size}'; expected auto, {', '.join(SIZES)}", field="size")
    return config.size


def plan(config: ProfileConfig) -> list[Measurement]:
    """Every job alone for every GPU count, then (with ``pairs``) every unordered pair, self-pairs included."""
    runs = [Measurement((m,), n) for n in config.gpu_counts for m in config.models]
    if config.pairs:
        runs += [Measurement((a, b), n) for n in config.gpu_counts
                 for a, b in itertools.combinations_with_replacement(config.models, 2)]
    return runs


def check_config(config: ProfileConfig, device: Device) -> None:
    if not config.models:
        raise InputError("no model to profile", field="models")
    if not (config.seconds > 0 and math.isfinite(config.seconds)):
        raise InputError(f"--seconds must be positive, got {config.seconds}", field="seconds")
    if config.warmup is not None and not (config.warmup >= 0 and math.isfinite(config.warmup)):
        raise InputError(f"--warmup must be at least 0, got {config.warmup}", field="warmup")
    most = max(config.gpu_counts)
    if most > device.count:
        if device.kind == "cuda":
            raise InputError(f"--gpus asks for {most} GPUs; PyTorch sees {device.count} here", field="gpus")
        raise InputError(f"--gpus asks for {most} CPU 'GPUs' of {device.cpu_threads} core(s) each; "
                         f"this process may use {len(device.cores)} core(s)", field="gpus")


# ----------------------------------------------------------------------------------- measurement
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class _Proc:
    job: int
    rank: int
    pid: int
    conn: Connection
    log: Path
    events: dict[str, dict[str, Any]] = field(default_factory=dict)
    done: bool = False  # the connection ended: the process is gone

    def send(self, word: str) -> None:
        with contextlib.suppress(OSError, EOFError):
            self.conn.send(word)


class MeasurementRun:
    """Runs one :class:`Measurement`'s processes through the worker protocol."""

    def __init__(self, m: Measurement, device: Device, size: str, config: ProfileConfig, pool: WorkerPool) -> None:
        self.m, self.device, self.size, self.config, self.pool = m, device, size, config, pool
        self.procs: list[_Proc] = []

    def _spec(self, job: int, rank: int, port: int | None) -> dict[str, Any]:
        n = self.m.num_gpus
        spec: dict[str, Any] = {
            "model": self.m.models[job], "size": self.size, "device": self.device.kind, "rank": rank,
            "world_size": n, "port": port, "seconds": self.config.seconds,
            "warmup": self.config.warmup_seconds, "timeout": self.config.timeout, "seed": job,
            "shared": self.m.is_pair, "threads": self.device.cpu_threads,
        }
        if self.device.kind == "cuda":
            spec["devices"] = list(range(n))
        else:
            spec["cores"] = [self.device.core_slice(i) for i in range(n)]
        return spec

    def _start(self, logs: Path) -> None:
        for job in range(len(self.m.models)):
            port = _free_port() if self.m.num_gpus > 1 else None
            for rank in range(self.m.num_gpus):
                log = logs / f"job{job}-rank{rank}.log"
                pid, conn = self.pool.start(self._spec(job, rank, port), log)
                self.procs.append(_Proc(job, rank, pid, conn, log))

    def _receive(self, timeout: float) -> None:
        live = {p.conn: p for p in self.procs if not p.done}
        for conn in wait(list(live), timeout):
            p = live[conn]  # type: ignore[index]
            try:
                msg = p.conn.recv()
            except (EOFError, OSError):
                p.done = True
                self.pool.ended(p.pid)
                continue
            if isinstance(msg, dict):
                p.events[str(msg.get("event"))] = msg

    def _wait_all(self, event: str, deadline: float) -> tuple[list[_Proc], list[_Proc]]:
        """Wait until every process sent ``event``; returns (processes out of memory, failed ones)."""
        while True:
            oom = [p for p in self.procs if "oom" in p.events]
            failed = [p for p in self.procs if "error" in p.events or (p.done and event not in p.events)]
            if oom or failed or all(event in p.events for p in self.procs):
                return oom, failed
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProfilerError(f"{self.m.describe(self.device)}: no '{event}' from every process within "
                                    f"{self.config.timeout:.0f} s (see --timeout)")
            self._receive(min(left, 1.0))

    def _finish(self, kill: bool) -> None:
        """Stop every process; kill those still running when ``kill`` or when they do not end in 30 s."""
        for p in self.procs:
            if not p.done:
                p.send("stop")
        deadline = time.monotonic() + (0.0 if kill else 30.0)
        while not kill and any(not p.done for p in self.procs) and time.monotonic() < deadline:
            self._receive(max(0.0, min(1.0, deadline - time.monotonic())))
        for p in self.procs:
            if not p.done:
                self.pool.kill(p.pid)
                p.done = True

    def _failure(self, failed: list[_Proc]) -> ProfilerError:
        p = failed[0]
        error = p.events.get("error", {})
        msg = error.get("message")
        frames = [line.strip() for line in str(error.get("traceback", "")).splitlines()
                  if line.startswith("  File ")]
        if msg is not None and frames:
            msg += f" ({frames[-1]})"
        if msg is None:
            msg = f"the process ended without a result; log: {log_tail(read_log(p.log))}"
        elif read_log(p.log).strip():
            msg += f"; log: {log_tail(read_log(p.log))}"
        return ProfilerError(f"{self.m.describe(self.device)}: {self.m.models[p.job]} (rank {p.rank}) failed: {msg}")

    def run(self) -> list[JobOutcome]:
        jobs = [JobOutcome(model, self.m.num_gpus) for model in self.m.models]
        deadline = time.monotonic() + self.config.timeout
        logs = self.pool.dir / f"run-{time.monotonic_ns()}"
        logs.mkdir()
        kill = True
        try:
            self._start(logs)
            for event, then in (("ready", "go"), ("window", "stop"), ("result", None)):
                oom, failed = self._wait_all(event, deadline)
                if oom:
                    for p in oom:
                        jobs[p.job].oom = True
                        jobs[p.job].message = p.events["oom"].get("message", "")
                    return jobs
                if failed:
                    raise self._failure(failed)
                if then is not None:
                    for p in self.procs:
                        p.send(then)
            kill = False
        finally:
            self._finish(kill)
            shutil.rmtree(logs, ignore_errors=True)
        for j, outcome in enumerate(jobs):
            mine = [p for p in self.procs if p.job == j]
            outcome.throughput = min(float(p.events["window"]["throughput"]) for p in mine)
            outcome.memory_gb = max(int(p.events["result"]["peak_memory_bytes"]) for p in mine) / GIB
            outcome.skew = float(mine[0].events["result"]["skew"])
            outcome.parameters = int(mine[0].events["result"]["parameters"])
        return jobs


# -------------------------------------------------------------------------------------- profile
Progress = Callable[[Measurement, int, int], None]


class ProfileSession:
    """Every check done and the workers started, before the first measurement.

    Opening it validates the models, finds PyTorch, starts the worker server, probes the device and
    checks the configuration against it, so a command can report any of those mistakes before it
    draws a progress display. Use as a context manager; :meth:`measure` runs the measurements.
    """

    def __init__(self, config: ProfileConfig) -> None:
        for name in config.models:
            size_settings(name, "tiny")  # validates the name
        if not torch_available():
            raise InputError("PyTorch is not installed; the profiler needs it: pip install 'tesserae[profiler]'")
        self.config = config
        self.pool = WorkerPool(timeout=max(PROBE_TIMEOUT_S, config.timeout))
        try:
            self.device = detect_device(config, self.pool.probe())
            check_config(config, self.device)
            self.size = resolve_size(config, self.device)
        except BaseException:
            self.pool.close()
            raise

    def __enter__(self) -> ProfileSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.pool.close()

    def measure(self, *, on_start: Progress | None = None,
                on_done: Callable[[Measurement, list[JobOutcome]], None] | None = None,
                on_restart: Callable[[RestartOutcome], None] | None = None) -> ProfileResult:
        """Measure everything the configuration asks for."""
        config, device, size = self.config, self.device, self.size
        result = ProfileResult(device, config, size)
        runs = plan(config)
        for i, m in enumerate(runs):
            if on_start is not None:
                on_start(m, i, len(runs))
            if m.is_pair and any(result.solo[(model, m.num_gpus)].oom for model in m.models):
                outcomes = [JobOutcome(model, m.num_gpus, oom=True, message="out of memory alone")
                            for model in m.models]
            else:
                outcomes = MeasurementRun(m, device, size, config, self.pool).run()
            if m.is_pair:
                result.pairs[(m.models[0], m.models[1], m.num_gpus)] = (outcomes[0], outcomes[1])
            else:
                result.solo[(m.models[0], m.num_gpus)] = outcomes[0]
            if on_done is not None:
                on_done(m, outcomes)
        for name in config.models if config.restart_runs > 0 else []:
            if all(o.oom for (model, _n), o in result.solo.items() if model == name):
                continue  # it cannot run here: there is nothing to restart
            try:
                outcome = measure_restart(name, size, device.kind, runs=config.restart_runs,
                                          cores=device.core_slice(0) if device.kind == "cpu" else None,
                                          threads=device.cpu_threads, checkpoint_dir=config.checkpoint_dir,
                                          timeout=config.timeout)
            except RestartError as exc:
                raise ProfilerError(f"restart cost of {name}: {exc}") from None
            result.restart[name] = outcome
            if on_restart is not None:
                on_restart(outcome)
        return result
