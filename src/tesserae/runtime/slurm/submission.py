"""What the Slurm executor submits for one part of a run: its folder, the spec its launcher reads, the
batch script (the launcher, root under Slurm), and the ``sbatch`` options that pin it to its node
and to exactly the GPUs the placement chose (one GRES type per GPU)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
from pathlib import Path

from tesserae.runtime.executor.protocol import Launch
from tesserae.runtime.job import env as job_env
from tesserae.runtime.slurm import launcher as part_launcher
from tesserae.runtime.slurm.nodes import Roster
from tesserae.runtime.slurm.runs import Part, SlurmRun

LAUNCHER = str(Path(part_launcher.__file__).resolve())
#: sbatch errors that mean Slurm did not answer (the run is lost and requeued, not failed).
TRANSIENT = ("did not answer", "Unable to contact", "timed out", "Socket timed out", "Zero Bytes",
             "Connection refused")


def write_part(launch: Launch, run: SlurmRun, part: Part, base: dict[str, str], total: int, *, python: str,
               partition: str, lease_path: str, master_ports: tuple[int, int] | None, roster: Roster) -> list[str]:
    """The part's folder, spec (``launcher``) and batch script; returns its sbatch options."""
    plan, first = part.plan, run.parts[0].plan
    part_dir = Path(part.part_dir)
    part_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    env = {**base, **launch.env, **job_env.device_env(plan.devices, first.ip, 0)}
    log = launch.log_path if plan.index == 0 else part_dir / "output.log"
    spec = {"argv": launch.argv, "env": env, "cwd": str(launch.cwd), "log": str(log),
            "account": None if launch.account is None else launch.account.launcher_arg(),
            "nproc": plan.nproc, "first_rank": plan.first_rank, "world": run.world, "index": plan.index,
            "parts": len(run.parts), "run_dir": run.marker, "master_addr": first.ip, "node": plan.node_id,
            "node_addr": plan.ip,
            "master_ports": None if master_ports is None else list(master_ports),
            "lease_file": lease_path}
    write_private(part_dir / part_launcher.SPEC_FILE, json.dumps(spec))
    script = f"#!/bin/sh\nexec {shlex.quote(python)} -I {shlex.quote(LAUNCHER)} {shlex.quote(str(part_dir))}\n"
    write_private(part_dir / "batch.sh", script)
    share = len(plan.keys) / max(1, total)
    node = roster.nodes.get(plan.node_id)
    gpu_model = node.gres_model if node is not None else ""
    options = ["--partition", partition, "--nodelist", plan.node_id, "--nodes", "1", "--ntasks", "1",
               "--cpus-per-task", str(max(1, math.ceil((launch.cpus or 1) * share))),
               "--gres", ",".join(f"gpu:{gpu_model}_{d}:1" for d in plan.devices),
               "--job-name", part.name, "--comment", f"tesserae run {run.marker}",
               "--no-requeue", "--time", "UNLIMITED", "--output", str(part_dir / "slurm.out"),
               "--open-mode", "append", "--chdir", "/", "--export", "ALL"]
    if launch.memory_mb is not None:
        options += ["--mem", f"{max(1, math.ceil(launch.memory_mb * share))}M"]
    return options


def write_private(path: Path, text: str) -> None:
    """Write ``path`` 0600 (root's: the job's environment is in the spec), never through a link."""
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
