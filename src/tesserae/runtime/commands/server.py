"""``tesserae server``: run the controller and the HTTP API (``runtime.server``), or detach it.

What the server mounts on its HTTP app besides the API (the dashboard of ``tesserae.web``) is given
to ``register`` by the caller that composes the command line (``tesserae.cli``): the runtime never
imports the web front end.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tesserae.cli_help import PlacementOpt, ServerPolicyOpt
from tesserae.cli_help import TesseraeCommand as OneLineErrors
from tesserae.cli_options import (
    KnobOpt,
    OldQueuesOpt,
    PlacementOptionsOpt,
    PolicyOptionsOpt,
    SkewOpt,
    ThresholdsOpt,
    parse_plugin_options,
    parse_queues,
)

if TYPE_CHECKING:
    from tesserae.runtime.api.app import AppExtension


def register(app: typer.Typer, extensions: Sequence[AppExtension] = ()) -> None:
    """Add ``tesserae server``; the server mounts ``extensions`` on its HTTP app (the command's context
    carries them to it)."""
    app.command(cls=OneLineErrors, context_settings={"obj": tuple(extensions)})(server)


def server(
    ctx: typer.Context,
    state: Annotated[Path, typer.Option("--state", help="State folder: store, logs, checkpoints, tokens.")],
    executor: Annotated[str, typer.Option("--executor", help="Where jobs run: local (this machine), ray (the "
                                          "nodes of a Ray cluster) or slurm (a Slurm partition).")] = "local",
    slurm_partition: Annotated[str | None, typer.Option("--slurm-partition", metavar="NAME", help="With "
                                                        "--executor slurm: the partition Tesserae schedules (its "
                                                        "slurm.conf settings are checked; docs/slurm.md).")] = None,
    slurm_lease: Annotated[float | None, typer.Option("--slurm-lease", min=1.0, metavar="SECONDS", help="With "
                                                      "--executor slurm: how long a run goes on without word from "
                                                      "the server (default 30); a run Slurm cannot stop is "
                                                      "restarted elsewhere only after it.")] = None,
    ray_address: Annotated[str | None, typer.Option("--ray-address", help="With --executor ray: the Ray "
                                                    "cluster (HOST:PORT of its head, or auto); without it a "
                                                    "local Ray instance is started.")] = None,
    ray_lease: Annotated[float | None, typer.Option("--ray-lease", min=1.0, metavar="SECONDS", help="With "
                                                    "--executor ray: how long a node cut off from the server "
                                                    "keeps its jobs running (default 30); a job there is "
                                                    "restarted elsewhere only after it.")] = None,
    master_ports: Annotated[str | None, typer.Option("--master-ports", metavar="LOW-HIGH", help="With "
                                                     "--executor ray or slurm: take each job's MASTER_PORT "
                                                     "from this range (default: any free port).")] = None,
    virtual_gpus: Annotated[int | None, typer.Option("--virtual-gpus", min=1, help="Declare N fake GPUs "
                                                     "instead of asking NVML (machines without GPUs).")] = None,
    gpu_type: Annotated[str, typer.Option("--gpu-type", help="Type of the virtual GPUs, or TYPE:N,... for "
                                          "several types (v100:2,k80:2).")] = "v100",
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port (0: any free port, written "
                                      "to server.json in the state folder).")] = 8765,
    round_seconds: Annotated[float, typer.Option("--round-seconds", min=0.1, help="Round length (s).")] = 60.0,
    grace_seconds: Annotated[float, typer.Option("--grace-seconds", min=0.0, help="Time between SIGTERM and "
                                                 "SIGKILL when a job is stopped (s).")] = 30.0,
    event_driven: Annotated[bool, typer.Option("--event-driven/--rounds-only", help="Also decide at once "
                                               "when a job arrives, ends or is cancelled.")] = True,
    policy: ServerPolicyOpt = "fifo",
    placement: PlacementOpt = "consolidated",
    packing: Annotated[bool, typer.Option("--packing", help="Let pairs of jobs share GPUs.")] = False,
    no_backfill: Annotated[bool, typer.Option("--no-backfill", help="Stop at the first job that does not "
                                              "fit.")] = False,
    tiresias_thresholds: ThresholdsOpt = None,
    queues: OldQueuesOpt = None,
    promote_knob: KnobOpt = None,
    gittins_prior: Annotated[str | None, typer.Option("--gittins-prior", help="File of job GPU-times.")] = None,
    gittins_index: Annotated[str | None, typer.Option("--gittins-index", help="tiresias (default) or "
                                                      "paper.")] = None,
    skew_threshold: SkewOpt = None,
    policy_opt: PolicyOptionsOpt = None,
    placement_opt: PlacementOptionsOpt = None,
    profile: Annotated[str | None, typer.Option("--profile", help="Throughput profile (with learned "
                                                "throughputs: the prior of the jobs whose --type it knows).")] = None,
    throughputs: Annotated[str, typer.Option("--throughputs", metavar="learned|profile", help="What the scheduler "
                                             "decides on: each job's rates learned from its own progress, with "
                                             "the profile as their prior (learned), or the profile's rates by job "
                                             "type (profile).")] = "learned",
    job_user: Annotated[str | None, typer.Option("--job-user", metavar="ACCOUNT", help="Run jobs as this "
                                                 "unprivileged Unix account (the server must be root).")] = None,
    user_map: Annotated[Path | None, typer.Option("--user-map", metavar="FILE", help="TOML [accounts] "
                                                  "table: each Tesserae user's jobs run as their own Unix "
                                                  "account (the server must be root).")] = None,
    insecure_same_user: Annotated[bool, typer.Option("--insecure-same-user", help="Run jobs as the server's "
                                                     "own account: a job can then read the admin token and "
                                                     "the store. For a machine only you use.")] = False,
    job_root: Annotated[Path | None, typer.Option("--job-root", metavar="DIR", help="Where jobs' own folders "
                                                  "live (default: STATE/jobs, or STATE-jobs beside the state "
                                                  "folder with job accounts).")] = None,
    pass_env: Annotated[list[str] | None, typer.Option("--pass-env", metavar="NAME", help="Also give jobs this "
                                                       "variable of the server's environment (repeatable).")
                        ] = None,
    cgroups: Annotated[str, typer.Option("--cgroups", metavar="auto|off", help="Track each job's processes in "
                                         "a cgroup v2 where one is usable (auto), or by session and marker "
                                         "only (off).")] = "auto",
    max_body_bytes: Annotated[int, typer.Option("--max-body-bytes", min=1024, help="Largest request body the "
                                                "API accepts.")] = 1 << 20,
    ready_file: Annotated[Path | None, typer.Option("--ready-file", metavar="FILE", help="Write this file "
                                                    "(url and pid) once the server answers requests.")] = None,
    detach: Annotated[bool, typer.Option("--detach", help="Run in the background: return once the server "
                                         "answers and the admin token is written (log: STATE/server.log).")
                      ] = False,
    new_store: Annotated[bool, typer.Option("--new-store", help="Begin an empty store in a state folder whose "
                                            "store was lost (its job folders moved aside first).")] = False,
    config: Annotated[Path | None, typer.Option("--config", metavar="FILE", help="Server config (YAML): tenant "
                                                "queues with guarantees, borrowing limits, weights and users; kept "
                                                "in the store (see README).")] = None,
    predict_restart_seconds: Annotated[float, typer.Option("--predict-restart-seconds", min=0.0, help="Restart "
                                                           "cost (s) the predicted start times charge per "
                                                           "(re)start.")] = 1.0,
    max_jobs_per_user: Annotated[int, typer.Option("--max-jobs-per-user", min=0, metavar="N", help="Most active "
                                                   "(waiting or running) jobs a user may have; more is refused "
                                                   "(HTTP 429). 0: no limit. Slurm's MaxSubmitJobs.")] = 10_000,
    max_queued_jobs: Annotated[int, typer.Option("--max-queued-jobs", min=0, metavar="N", help="Most waiting jobs "
                                                 "on the server, all users together; more is refused (HTTP 429). "
                                                 "0: no limit. After Slurm's MaxJobCount.")] = 100_000,
    gpu_health: Annotated[str, typer.Option("--gpu-health", metavar="auto|off|COMMAND", help="Probe the GPUs' "
                                            "health with nvidia-smi (uncorrectable ECC errors, pending page "
                                            "retirement, failed row remaps, a lost GPU); an unhealthy GPU takes no "
                                            "new run. auto: nvidia-smi for NVML's GPUs, none for virtual ones. "
                                            "With --executor ray each node's agent probes its own GPUs.")
                      ] = "auto",
    gpu_health_interval: Annotated[float, typer.Option("--gpu-health-interval", min=1.0, metavar="SECONDS",
                                                       help="Seconds between two GPU health probes.")] = 30.0,
) -> None:
    """Run the controller and the HTTP API: jobs are scheduled by the same core as the simulator."""
    from tesserae.extras import require

    require("server", "tesserae server")  # before anything is written
    from tesserae.config import RunSpec, with_options
    from tesserae.runtime.detach import DETACHED_VAR, detach_server
    from tesserae.runtime.server import ServerOptions, say, serve

    if detach:
        detach_server(state, ready_file, say)
        return
    run = RunSpec(policy=policy, placement=placement, round_seconds=round_seconds, packing=packing,
                  no_backfill=no_backfill, event_driven=event_driven)
    run = with_options(run, policy=parse_plugin_options(policy_opt, "policy-opt"),
                       placement=parse_plugin_options(placement_opt, "placement-opt"),
                       shared_policy={"queues": parse_queues(tiresias_thresholds, queues), "promote_knob": promote_knob,
                                      "gittins_prior": gittins_prior, "gittins_index": gittins_index},
                       shared_placement={"skew_threshold": skew_threshold})
    serve(ServerOptions(state=state, run=run, executor=executor, ray_address=ray_address, ray_lease=ray_lease,
                        master_ports=master_ports, slurm_partition=slurm_partition, slurm_lease=slurm_lease,
                        virtual_gpus=virtual_gpus, gpu_type=gpu_type,
                        host=host, port=port, grace_seconds=grace_seconds, event_driven=event_driven,
                        profile=profile, job_user=job_user, user_map=user_map,
                        insecure_same_user=insecure_same_user, job_root=job_root,
                        pass_env=tuple(pass_env or ()), cgroups=cgroups, max_body_bytes=max_body_bytes,
                        ready_file=ready_file, new_store=new_store, config=config,
                        predict_restart_seconds=predict_restart_seconds, throughputs=throughputs,
                        max_jobs_per_user=max_jobs_per_user, max_queued_jobs=max_queued_jobs,
                        gpu_health=gpu_health, gpu_health_interval=gpu_health_interval,
                        log_to_state=os.environ.get(DETACHED_VAR) == "1"), extensions=ctx.obj or ())
