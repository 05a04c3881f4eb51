"""``tesserae trace import slurm``: a Slurm site's own history into the canonical trace format.

From a ``sacct --parsable2`` dump (FILE), or with ``--sacct`` by calling ``sacct`` here with the
fields the reader needs (``traces.slurm.SACCT_FORMAT``), ``--allocations`` (no steps),
``--duplicates`` (every attempt of a requeued job), all users, and ``TZ=UTC`` so that the times
it prints are UTC. The dump ``--sacct`` took is kept beside the output (``OUT.sacct.txt``), so the
import can be redone and checked. What was left out, and why, is printed, never skipped silently.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from tesserae.cli_help import TesseraeCommand, TesseraeGroup
from tesserae.core.errors import InputError

#: What the ``sacct`` process gets of this environment (nothing else: its times must be UTC).
SACCT_ENV = ("PATH", "SLURM_CONF", "LANG", "HOME", "USER", "LOGNAME")


def sacct_command(since: str, until: str, partition: str | None, clusters: str | None) -> list[str]:
    from tesserae.traces.slurm import SACCT_FORMAT

    cmd = ["sacct", "--parsable2", "--allocations", "--duplicates", "--allusers", "--noconvert",
           "--starttime", since, "--endtime", until, "--format", ",".join(SACCT_FORMAT)]
    if partition:
        cmd += ["--partition", partition]
    if clusters:
        cmd += ["--clusters", clusters]
    return cmd


def run_sacct(cmd: list[str], dump: Path, timeout: float = 600.0) -> None:
    """Run sacct with its output into ``dump``; one line naming what went wrong when it fails."""
    if shutil.which(cmd[0]) is None:
        raise InputError("sacct is not installed here (Debian: apt-get install slurm-client); or pass a dump "
                         "taken with 'sacct --parsable2' as FILE", field="sacct")
    env = {k: os.environ[k] for k in SACCT_ENV if k in os.environ}
    env.update({"TZ": "UTC", "SLURM_TIME_FORMAT": "standard"})
    dump.parent.mkdir(parents=True, exist_ok=True)
    with open(dump, "wb") as out:
        try:
            r = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, env=env, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise InputError(f"sacct did not answer within {timeout:g} s", field="sacct") from None
    if r.returncode != 0:
        lines = [ln for ln in r.stderr.decode(errors="replace").splitlines() if ln.strip()]
        raise InputError(f"sacct failed (exit {r.returncode}): {lines[0] if lines else 'no message'}", field="sacct")


def register(trace_app: typer.Typer, console: Console) -> None:
    """Add ``import slurm`` to the ``trace`` command group."""
    import_app = typer.Typer(cls=TesseraeGroup, no_args_is_help=True, rich_markup_mode=None,
                             help="Import a site's own job history into the canonical format.")
    trace_app.add_typer(import_app, name="import")

    @import_app.command("slurm", cls=TesseraeCommand)
    def import_slurm(
        out: Annotated[Path, typer.Option("--out", help="Canonical output: .csv or .parquet.")],
        path: Annotated[Path | None, typer.Argument(help="A 'sacct --parsable2' dump (without it: --sacct).")] = None,
        sacct: Annotated[bool, typer.Option("--sacct", help="Call sacct here for the history (the dump is kept as "
                                            "OUT.sacct.txt).")] = False,
        since: Annotated[str, typer.Option("--since", help="With --sacct: first day (sacct --starttime).")]
        = "now-30days",
        until: Annotated[str, typer.Option("--until", help="With --sacct: last moment (sacct --endtime).")] = "now",
        partition: Annotated[str | None, typer.Option("--partition", help="With --sacct: only these partitions "
                                                      "(comma-separated).")] = None,
        clusters: Annotated[str | None, typer.Option("--clusters", help="With --sacct: these clusters.")] = None,
        timezone: Annotated[str, typer.Option("--timezone", help="Time zone of FILE's times (an IANA name; sacct "
                                              "prints local time). --sacct asks sacct for UTC.")] = "UTC",
        queue: Annotated[str, typer.Option("--queue", help="Tenant queue of a job: account, partition, "
                                           "partition.account, user or none.")] = "account",
        gpu_type: Annotated[str | None, typer.Option("--gpu-type", help="Type of GPUs the dump does not type "
                                                     "(gres/gpu=N on a site without GRES types).")] = None,
        keep_types: Annotated[bool, typer.Option("--keep-requested-types", help="A GPU type a job asked for "
                                                 "(ReqTRES gres/gpu:a100) is the only type it may run on (tesserae "
                                                 "and gavel placements refuse such jobs).")] = False,
        profile: Annotated[str | None, typer.Option("--profile", help="Throughput profile (default: built-in "
                                                    "model).")] = None,
        seed: Annotated[int, typer.Option("--seed", help="Seed of the job types drawn for jobs whose name is no "
                                          "known type.")] = 0,
    ) -> None:
        """A Slurm history (sacct) as a canonical trace: simulate it under any policy (see README)."""
        from tesserae.profiles.loader import load_profile
        from tesserae.traces.canonical import write_canonical
        from tesserae.traces.slurm import read_slurm_import

        if sacct == (path is not None):
            raise InputError("give a sacct dump (FILE) or --sacct, one of the two", field="sacct")
        if not sacct and any(v is not None for v in (partition, clusters)):
            raise InputError("--partition and --clusters go with --sacct", field="sacct")
        if sacct:
            path = out.with_name(out.name + ".sacct.txt")
            run_sacct(sacct_command(since, until, partition, clusters), path)
            timezone = "UTC"
        assert path is not None
        result = read_slurm_import(path, load_profile(profile), seed, zone=timezone, queue_by=queue,
                                   gpu_type=gpu_type, keep_requested_types=keep_types)
        out.parent.mkdir(parents=True, exist_ok=True)
        write_canonical(result.jobs, out)
        jobs = result.jobs
        gpu_hours = sum(j.num_gpus * (j.duration or 0.0) for j in jobs) / 3600
        span = (jobs[-1].submit_time - jobs[0].submit_time) / 86400
        console.print(escape(f"imported {len(jobs)} jobs ({gpu_hours:.1f} GPU-hours, submitted over {span:.2f} days) "
                             f"of {result.records} records in {path} into {out}; times read in {result.zone}"),
                      soft_wrap=True)
        for why, n in sorted(result.left_out.items(), key=lambda x: -x[1]):
            console.print(escape(f"  left out: {n} {why}"), soft_wrap=True)
        queues = sorted({j.queue for j in jobs if j.queue})
        console.print(escape(f"{len(queues)} tenant queue(s) by {queue}; next: tesserae trace info {out}; tesserae "
                             f"compare --trace {out} --queue-config derived --cluster ... --run ... --out ..."),
                      soft_wrap=True)
