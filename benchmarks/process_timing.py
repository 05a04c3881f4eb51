"""How ``peer_speed.py`` times one simulator run: a whole process, its wall and CPU seconds, one BLAS/OpenMP
thread, bytecode caches used, stopped after a CPU budget that does not depend on the machine's load."""

from __future__ import annotations

import dataclasses
import os
import resource
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

#: Single-threaded BLAS and OpenMP for both sides: the measuring machine is shared.
THREADS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclasses.dataclass
class Timing:
    wall: float
    cpu: float
    finished: bool


def child_env() -> dict[str, str]:
    """The environment of every timed process: one thread, and bytecode caches used (as after any
    installation; a machine that sets PYTHONDONTWRITEBYTECODE would otherwise compile every module
    of both simulators from source at every start)."""
    env = {**os.environ, **THREADS}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def compile_sources(python: str, folder: Path) -> None:
    """Write the bytecode caches of one side's sources before anything is timed."""
    subprocess.run([python, "-m", "compileall", "-q", str(folder)], env=child_env(), check=True,
                   stdout=subprocess.DEVNULL)


def timed(cmd: list[str], cwd: Path | None, log: Path, cpu_limit: float) -> Timing:
    """Run ``cmd`` to completion, or until it has used ``cpu_limit`` s of CPU (RLIMIT_CPU: the limit
    does not depend on how loaded the machine is; a wall-clock guard of 20 times it backs it up);
    its wall and CPU seconds."""
    env = child_env()
    limit = max(1, int(cpu_limit))

    def cap_cpu() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 5))

    with log.open("w") as f:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, env=env, preexec_fn=cap_cpu)
        killer = threading.Timer(20 * cpu_limit, p.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(p.pid, 0)
        finally:
            killer.cancel()
        wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    finished = p.returncode == 0
    stopped = p.returncode in (-signal.SIGXCPU, -signal.SIGKILL)  # the CPU limit (or the wall guard)
    if not finished and not stopped:
        sys.exit(f"{shlex.join(cmd)} failed (exit {p.returncode}); its output is in {log}")
    return Timing(wall, cpu, finished)
