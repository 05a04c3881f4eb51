"""One profiling process: the worker side of a measurement, and the device probe.

The parent (:mod:`tesserae.profiler.runner`) starts one worker per process of a measurement: one
for a job alone on one GPU, ``n`` for a job on ``n`` GPUs (DistributedDataParallel, gloo on CPU,
nccl on CUDA), twice that for a pair sharing the GPUs.

Workers are forked by a *zygote*, ``python -m tesserae.profiler.worker --serve SOCKET``, which
imports PyTorch (and the parts of it an optimizer pulls in, about as long again) once and never
touches CUDA. A worker is thus a fresh process that starts in milliseconds instead of seconds. The
zygote reads one JSON request a line on stdin (``{"tag", "spec" | "probe", "log"}``), forks, and
answers ``{"pid"}``; the child connects to the parent's Unix socket ``SOCKET``, says
``{"event": "hello", "tag", "pid"}`` and then speaks the measurement protocol on that connection::

    worker -> {"event": "ready"}              warmed up (DDP ranks agree when)
    parent -> "go"                            sent to every process of the measurement at once
    worker -> {"event": "window", ...}        iterations and seconds of the timed window
    (the worker keeps training, so its partner's window is shared to its end)
    parent -> "stop"                          once every process has reported its window
    worker -> {"event": "result", ...}        peak memory, parameters, skew; then it exits

``go`` is the barrier: every process of a pair starts its timed window at the same moment. An
out-of-memory error at any point is reported as ``{"event": "oom"}`` (not a crash); any other
exception as ``{"event": "error"}``. What a worker prints (PyTorch warnings, C++ logs, a crash's
stack) goes to its log file, which the parent shows when the worker fails.

``python -m tesserae.profiler.worker --probe`` prints what this interpreter can use (PyTorch
version, CUDA devices and driver, CPU model and cores) as JSON; the profiler asks a zygote's child
the same, so the parent never creates a CUDA context.

Fault injection for tests: ``TESSERAE_PROFILER_INJECT_OOM="dcgan,resnet18:always"`` makes the
named models raise a CUDA out-of-memory error at their first step when they share the device
(``:always``: also alone), so the out-of-memory path can be exercised on a CPU.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import platform
import resource
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any, NoReturn

INJECT_OOM_ENV = "TESSERAE_PROFILER_INJECT_OOM"


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` means the device (or the host, for CPU runs) ran out of memory."""
    import torch

    if isinstance(exc, torch.cuda.OutOfMemoryError | MemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text
                                              or "cudnn_status_alloc_failed" in text)


def injected_oom(model: str, shared: bool, env: str | None = None) -> bool:
    """Whether :data:`INJECT_OOM_ENV` asks ``model`` to fail with an out-of-memory error."""
    spec = os.environ.get(INJECT_OOM_ENV, "") if env is None else env
    for item in spec.split(","):
        name, _, when = item.strip().partition(":")
        if name == model and (shared or when == "always"):
            return True
    return False


class Channel:
    """The worker's end of the pipe: events out as dicts, commands ('go', 'stop') in as strings."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def send(self, event: str, **fields: Any) -> None:
        with contextlib.suppress(OSError, EOFError):  # the parent is gone; the next command() says stop
            self.conn.send({"event": event, **fields})

    def command(self, timeout: float | None) -> str:
        """The next command; 'stop' when the parent has gone; '' on timeout."""
        try:
            if not self.conn.poll(timeout):
                return ""
            return str(self.conn.recv())
        except (EOFError, OSError):
            return "stop"

    def poll(self) -> str | None:
        """A command if one is waiting, else None (never blocks)."""
        return self.command(0.0) or None


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB, macOS bytes


class Worker:
    """Runs the protocol for one process (see module docstring); ``spec`` comes from the parent."""

    def __init__(self, spec: dict[str, Any], channel: Channel) -> None:
        self.spec = spec
        self.chan = channel
        self.rank = int(spec.get("rank", 0))
        self.world = int(spec.get("world_size", 1))

    def run(self) -> int:
        """Run the protocol; 0 on success or out of memory, 1 on any other failure."""
        try:
            import torch
        except ImportError as exc:
            self.chan.send("error", rank=self.rank, message=f"PyTorch cannot be imported ({exc})", no_torch=True)
            return 1
        try:
            self._run(torch)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            if is_oom(exc):
                self.chan.send("oom", rank=self.rank, message=str(exc).splitlines()[0][:300] if str(exc) else "")
                return 0
            self.chan.send("error", rank=self.rank, message=f"{type(exc).__name__}: {exc}"[:500],
                           traceback=traceback.format_exc()[-4000:])
            return 1
        return 0

    def _run(self, torch: Any) -> None:
        spec = self.spec
        base_rss = _rss_bytes()
        cuda = spec["device"] == "cuda"
        if cuda:
            device = torch.device("cuda", int(spec["devices"][self.rank]))
            torch.cuda.set_device(device)
        else:
            device = torch.device("cpu")
            cores = spec.get("cores")
            if cores and hasattr(os, "sched_setaffinity"):
                os.sched_setaffinity(0, set(cores[self.rank]))
        torch.set_num_threads(int(spec.get("threads", 1)))
        if self.world > 1:
            import torch.distributed as dist

            dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{spec['port']}",
                                    rank=self.rank, world_size=self.world,
                                    timeout=timedelta(seconds=float(spec.get("timeout", 600))))
        try:
            self._measure(torch, device, cuda, base_rss)
        finally:
            if self.world > 1:
                import torch.distributed as dist

                dist.destroy_process_group()

    def _agree(self, torch: Any, device: Any, value: float) -> float:
        """The maximum of ``value`` over the job's ranks (itself when alone)."""
        if self.world == 1:
            return value
        import torch.distributed as dist

        t = torch.tensor([float(value)], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def _measure(self, torch: Any, device: Any, cuda: bool, base_rss: int) -> None:
        from tesserae.profiler.models import build

        spec = self.spec
        wrap: Callable[[Any], Any] = lambda m: m  # noqa: E731
        if self.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            def wrap(m: Any) -> Any:
                return DistributedDataParallel(m, device_ids=[device.index] if cuda else None)

        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        job = build(spec["model"], spec["size"], device, wrap=wrap, seed=int(spec.get("seed", 0)))
        step = job.step
        if injected_oom(spec["model"], bool(spec.get("shared"))):
            def step() -> None:
                raise torch.cuda.OutOfMemoryError(f"CUDA out of memory (injected by {INJECT_OOM_ENV})")

        def sync() -> None:
            if cuda:
                torch.cuda.synchronize(device)

        # Warm-up: at least two steps (the first pays for lazy initialisation) and `warmup` seconds;
        # ranks of a DDP job stop together, so their collectives stay matched.
        warmup = float(spec.get("warmup", 1.0))
        start = time.perf_counter()
        steps, last = 0, 0.0
        while True:
            t0 = time.perf_counter()
            step()
            sync()
            last = time.perf_counter() - t0
            steps += 1
            if not self._agree(torch, device, 0.0 if steps >= 2 and time.perf_counter() - start >= warmup else 1.0):
                break
        step_time = self._agree(torch, device, last)
        seconds = float(spec["seconds"])
        # A DDP job's ranks must run the same number of steps: they agree on it from the warm-up.
        fixed = max(1, round(seconds / step_time)) if self.world > 1 and step_time > 0 else None

        self.chan.send("ready", rank=self.rank)
        cmd = self.chan.command(float(spec.get("timeout", 600)))
        if cmd != "go":
            return  # stopped (a partner failed) or the parent is gone

        sync()
        t0 = time.perf_counter()
        iterations = 0
        while True:
            step()
            iterations += 1
            if (iterations >= fixed) if fixed is not None else (time.perf_counter() - t0 >= seconds):
                break
        sync()
        elapsed = time.perf_counter() - t0
        self.chan.send("window", rank=self.rank, iterations=iterations, seconds=elapsed,
                       throughput=iterations / elapsed)

        # Keep the device busy until every process of the measurement has finished its window.
        deadline = time.monotonic() + float(spec.get("timeout", 600))
        while not self._agree(torch, device, 1.0 if self.chan.poll() is not None or time.monotonic() > deadline
                              else 0.0):
            step()
        sync()

        if cuda:
            peak = torch.cuda.max_memory_allocated(device)
            reserved = torch.cuda.max_memory_reserved(device)
        else:
            peak = max(0, _peak_rss_bytes() - base_rss)
            reserved = _peak_rss_bytes()
        self.chan.send("result", rank=self.rank, peak_memory_bytes=peak, reserved_bytes=reserved,
                       parameters=job.parameters, skew=job.skew, batch=job.batch)


# ------------------------------------------------------------------------------------------- probe
def cpu_name() -> str:
    """The CPU's model name (Linux /proc/cpuinfo, else what the platform module says)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def usable_cores() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def nvidia_driver() -> str:
    """The NVIDIA driver version from nvidia-ml-py, or 'unknown' when it cannot say."""
    try:
        import pynvml  # provided by the nvidia-ml-py package
    except ImportError:
        return "unknown"
    try:
        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # NVML errors have many classes; none of them should stop a profile
        return "unknown"
    return version.decode() if isinstance(version, bytes) else str(version)


def probe() -> dict[str, Any]:
    """What this interpreter can measure on (see module docstring)."""
    info: dict[str, Any] = {"cpu_name": cpu_name(), "cores": usable_cores(), "python": platform.python_version()}
    try:
        import torch
    except ImportError as exc:
        info["torch_error"] = str(exc)
        return info
    info["torch_version"] = str(torch.__version__)
    cuda = bool(torch.cuda.is_available())
    info["cuda_count"] = torch.cuda.device_count() if cuda else 0
    info["cuda_names"] = [torch.cuda.get_device_name(i) for i in range(info["cuda_count"])]
    info["cuda_version"] = None if torch.version.cuda is None else str(torch.version.cuda)
    info["nccl"] = bool(cuda and torch.distributed.is_available() and torch.distributed.is_nccl_available())
    info["gloo"] = bool(torch.distributed.is_available() and torch.distributed.is_gloo_available())
    info["driver"] = nvidia_driver() if cuda else "n/a"
    return info


def _child(request: dict[str, Any], socket_path: str) -> NoReturn:
    """A forked child of the zygote: logs to its file, connects to the parent, runs, exits."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        log = request.get("log") or os.devnull
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        sys.stdout = sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        faulthandler.enable()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(socket_path)
        conn = Connection(sock.detach())
        conn.send({"event": "hello", "tag": request.get("tag"), "pid": os.getpid()})
        if request.get("probe"):
            conn.send(probe())
            code = 0
        else:
            code = Worker(request["spec"], Channel(conn)).run()
        conn.close()
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)


def serve(socket_path: str) -> int:
    """The zygote (see module docstring): forks a child per request until stdin closes."""
    try:
        import torch

        import tesserae.profiler.models  # noqa: F401 - preloaded for the children
        # An optimizer's constructor imports torch._dynamo (as long as importing torch): pay it here, once.
        torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
        if torch.cuda.is_initialized():  # the children could not use CUDA: refuse to serve
            raise RuntimeError("CUDA was initialised in the worker server before fork")
    except ImportError as exc:
        print(json.dumps({"event": "hello", "torch_error": str(exc)}), flush=True)
        return 0
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    print(json.dumps({"event": "hello", "torch_version": torch.__version__, "pid": os.getpid()}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            _child(request, socket_path)
        print(json.dumps({"pid": pid, "tag": request.get("tag")}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--probe"]:
        print(json.dumps(probe()), flush=True)
        return 0
    if len(args) == 2 and args[0] == "--serve":
        return serve(args[1])
    print("usage: python -m tesserae.profiler.worker --probe | --serve SOCKET", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
