"""The runtime's commands of ``tesserae``: server, token, submit, jobs, show, cancel, logs, cluster.

``register(app)`` adds them to the main Typer app (``tesserae.cli`` calls it). Heavy imports
(FastAPI, uvicorn, the scheduler) happen inside the commands, so the client commands start fast.
A usage mistake (a missing argument, ``--gpus two``) is reported like every other user error: one
line on stderr and exit status 2.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from tesserae.cli_help import PlacementOpt, ServerPolicyOpt, TesseraeGroup
from tesserae.cli_help import TesseraeCommand as OneLineErrors
from tesserae.cli_options import parse_queues
from tesserae.core.errors import InputError

console = Console()
err = Console(stderr=True)

FINAL_STATES = ("completed", "failed", "cancelled")
_STATE_STYLE = {"queued": "yellow", "running": "green", "preempted": "magenta", "completed": "blue",
                "failed": "red", "cancelled": "dim"}


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = round(seconds)
    if s < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def _iterations(job: dict[str, Any]) -> str:
    done, total = job["iterations_done"], job["iterations_total"]
    text = f"{done:g}"
    return f"{text}/{total}" if total else text


def _state(job: dict[str, Any]) -> str:
    state = job["state"]
    extra = " (cancelling)" if job.get("cancel_requested") and state == "running" else ""
    return f"[{_STATE_STYLE.get(state, '')}]{state}[/]{extra}"


def _client() -> Any:
    from tesserae.runtime.client import Client

    return Client()


def _job_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"'{text}' is not a job id (a positive integer)", field="ID") from None
    if value < 1:
        raise InputError(f"'{text}' is not a job id (a positive integer)", field="ID")
    return value


def _warn_relative_paths(args: list[str], job_id: int) -> None:
    """The job runs in its own folder (STATE/jobs/ID/work), where a path relative to this folder means
    nothing: say so when an argument names a file or folder that exists here."""
    here = [a for a in args if a and not a.startswith(("-", "/", "~")) and "=" not in a and Path(a).exists()]
    if here:
        err.print(f"note: job {job_id} runs in its own folder on the server, where '{here[0]}' (a path relative to "
                  f"this folder) will not be found; give $PWD/{here[0]} or submit with --workdir .",
                  highlight=False, markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add the runtime commands to ``app``."""
    token_app = typer.Typer(cls=TesseraeGroup, no_args_is_help=True, rich_markup_mode=None, help="Create API tokens.")
    app.add_typer(token_app, name="token")

    # ------------------------------------------------------------------ server
    @app.command(cls=OneLineErrors)
    def server(
        state: Annotated[Path, typer.Option("--state", help="State folder: store, logs, checkpoints, tokens.")],
        executor: Annotated[str, typer.Option("--executor", help="Where jobs run: local (this machine) or ray (the "
                                              "nodes of a Ray cluster).")] = "local",
        ray_address: Annotated[str | None, typer.Option("--ray-address", help="With --executor ray: the Ray "
                                                        "cluster (HOST:PORT of its head, or auto); without it a "
                                                        "local Ray instance is started.")] = None,
        virtual_gpus: Annotated[int | None, typer.Option("--virtual-gpus", min=1, help="Declare N fake GPUs "
                                                         "instead of asking NVML (machines without GPUs).")] = None,
        gpu_type: Annotated[str, typer.Option("--gpu-type", help="Type of the virtual GPUs.")] = "v100",
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
        queues: Annotated[str | None, typer.Option("--queues", help="Tiresias queue thresholds (GPU-s).")] = None,
        promote_knob: Annotated[float | None, typer.Option("--promote-knob", min=0.0, help="Tiresias "
                                                           "starvation guard P.")] = None,
        gittins_prior: Annotated[str | None, typer.Option("--gittins-prior", help="File of job GPU-times.")] = None,
        gittins_index: Annotated[str | None, typer.Option("--gittins-index", help="tiresias (default) or "
                                                          "paper.")] = None,
        skew_threshold: Annotated[float | None, typer.Option("--skew-threshold", help="Tiresias placement skew "
                                                             "threshold.")] = None,
        profile: Annotated[str | None, typer.Option("--profile", help="Throughput profile.")] = None,
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
    ) -> None:
        """Run the controller and the HTTP API: jobs are scheduled by the same core as the simulator."""
        from tesserae.runtime.detach import DETACHED_VAR, detach_server
        from tesserae.runtime.server import ServerOptions, say, serve
        from tesserae.sim.runner import RunSpec

        if detach:
            detach_server(state, ready_file, say)
            return
        run = RunSpec(policy=policy, placement=placement, round_seconds=round_seconds, packing=packing,
                      no_backfill=no_backfill, queues=parse_queues(queues), promote_knob=promote_knob,
                      gittins_prior=gittins_prior, gittins_index=gittins_index, skew_threshold=skew_threshold,
                      event_driven=event_driven)
        serve(ServerOptions(state=state, run=run, executor=executor, ray_address=ray_address,
                            virtual_gpus=virtual_gpus, gpu_type=gpu_type,
                            host=host, port=port, grace_seconds=grace_seconds, event_driven=event_driven,
                            profile=profile, job_user=job_user, user_map=user_map,
                            insecure_same_user=insecure_same_user, job_root=job_root,
                            pass_env=tuple(pass_env or ()), cgroups=cgroups, max_body_bytes=max_body_bytes,
                            ready_file=ready_file, new_store=new_store,
                            log_to_state=os.environ.get(DETACHED_VAR) == "1"))

    # ------------------------------------------------------------------ tokens
    @token_app.command("create", cls=OneLineErrors)
    def token_create(
        user: Annotated[str, typer.Option("--user", help="User the token acts as.")],
        admin: Annotated[bool, typer.Option("--admin", help="An admin token: sees and cancels every job.")] = False,
        label: Annotated[str, typer.Option("--label", help="A note stored with the token.")] = "",
        state: Annotated[Path | None, typer.Option("--state", help="Write into this server's store directly "
                                                   "(on the server machine); without it, ask the server with an "
                                                   "admin TESSERAE_TOKEN.")] = None,
    ) -> None:
        """Create a token and print it (once: the server keeps only its hash)."""
        import re

        if not re.fullmatch(r"[A-Za-z0-9_.@\-]{1,100}", user):
            raise InputError(f"'{user}' is not a valid user name (letters, digits, _ . @ -)", field="user")
        if state is not None:
            from tesserae.runtime.store import DB_NAME, Store

            store = Store(state / DB_NAME, create=False)
            try:
                token = store.create_token(user, admin=admin, label=label)
            finally:
                store.close()
        else:
            with _client() as c:
                token = c.create_token(user, admin=admin, label=label)
        print(token)
        err.print(f"token for {'admin ' if admin else ''}user '{user}' (shown once; the server stores only its "
                  "hash)", highlight=False)

    # ------------------------------------------------------------------ jobs
    @app.command(cls=OneLineErrors, context_settings={"allow_interspersed_args": False,
                                                      "ignore_unknown_options": True})
    def submit(
        command: Annotated[list[str] | None, typer.Argument(help="The command and its arguments, after --.",
                                                            metavar="-- CMD [ARGS]...")] = None,
        gpus: Annotated[int, typer.Option("--gpus", min=1, help="GPUs the job needs (all at once).")] = 1,
        name: Annotated[str | None, typer.Option("--name", help="Display name.")] = None,
        job_type: Annotated[str | None, typer.Option("--type", help="Job type (model), as the profile names "
                                                     "it.")] = None,
        iterations: Annotated[int | None, typer.Option("--iterations", min=1, help="Total iterations, if "
                                                       "known.")] = None,
        env: Annotated[list[str] | None, typer.Option("--env", help="KEY=VALUE, repeatable.")] = None,
        workdir: Annotated[str | None, typer.Option("--workdir", help="Working directory on the server "
                                                    "(default: the job's own folder); '.' = here.")] = None,
        shell: Annotated[bool, typer.Option("--shell", help="Run CMD as one /bin/sh command line.")] = False,
        nproc: Annotated[int, typer.Option("--nproc", min=1, help="Copies of CMD (RANK 0..N-1).")] = 1,
        idempotency_key: Annotated[str | None, typer.Option("--idempotency-key", metavar="KEY", help="Submit at "
                                                            "most once per KEY (default: a fresh key, so retries "
                                                            "of this command's request never submit twice).")
                                   ] = None,
    ) -> None:
        """Submit a job; prints its id. Example: tesserae submit --gpus 2 -- python train.py --lr 0.1"""
        if not command:
            raise InputError("no command: put it after --, e.g. tesserae submit --gpus 1 -- python train.py")
        payload: dict[str, Any] = {"command": [" ".join(command)] if shell else command, "gpus": gpus,
                                   "shell": shell, "nproc": nproc}
        if name is not None:
            payload["name"] = name
        if job_type is not None:
            payload["job_type"] = job_type
        if iterations is not None:
            payload["iterations"] = iterations
        if env:
            pairs = {}
            for item in env:
                key, sep, value = item.partition("=")
                if not sep or not key:
                    raise InputError(f"'{item}' is not KEY=VALUE", field="env")
                pairs[key] = value
            payload["env"] = pairs
        if workdir is not None:
            payload["workdir"] = str(Path(workdir).expanduser().resolve())
        with _client() as c:
            job = c.submit(payload, idempotency_key=idempotency_key)
        print(job["id"])
        if workdir is None and not shell:
            _warn_relative_paths(command[1:], job["id"])

    @app.command(cls=OneLineErrors)
    def jobs(
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
        state: Annotated[str | None, typer.Option("--state", help="Only jobs in this state.")] = None,
    ) -> None:
        """List your jobs (every job for an admin)."""
        with _client() as c:
            items = c.jobs(state)
        if as_json:
            print(json.dumps(items, indent=2))
            return
        if not items:
            console.print("no jobs")
            return
        table = Table(box=None, pad_edge=False)
        for col in ("ID", "NAME", "USER", "STATE", "GPUS", "ITERS", "WAITED", "RAN", "PREEMPT", "ON GPUS"):
            table.add_column(col, justify="right" if col in ("ID", "GPUS", "PREEMPT") else "left")
        for j in items:
            table.add_row(str(j["id"]), j["name"], j["user"], _state(j), str(j["gpus"]), _iterations(j),
                          _duration(j["queueing_seconds"]), _duration(j["executed_seconds"]), str(j["preemptions"]),
                          ",".join(map(str, j["assigned_gpus"] or [])) or "-")
        console.print(table)

    @app.command(cls=OneLineErrors)
    def show(
        job_id: Annotated[str, typer.Argument(metavar="ID", help="Job id.")],
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    ) -> None:
        """One job in detail, with its events."""
        with _client() as c:
            j = c.show(_job_id(job_id))
        if as_json:
            print(json.dumps(j, indent=2))
            return
        table = Table(show_header=False, box=None, pad_edge=False)
        table.add_column(style="bold")
        table.add_column()
        cmd = j["command"][0] if j["shell"] else " ".join(j["command"])
        rows = [("id", str(j["id"])), ("name", j["name"]), ("user", j["user"]), ("state", _state(j)),
                ("gpus", f"{j['gpus']}" + (f" (on {','.join(map(str, j['assigned_gpus']))})"
                                           if j["assigned_gpus"] else "")),
                ("type", j["job_type"]), ("command", cmd), ("iterations", _iterations(j)),
                ("submitted", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(j["submit_time"]))),
                ("waited", _duration(j["queueing_seconds"])), ("ran", _duration(j["executed_seconds"])),
                ("jct", _duration(j["jct_seconds"])), ("preemptions", str(j["preemptions"])),
                ("migrations", str(j["migrations"]))]
        if j["exit_code"] is not None:
            rows.append(("exit code", str(j["exit_code"])))
        if j["reason"]:
            rows.append(("reason", j["reason"]))
        for k, v in rows:
            table.add_row(k, v)
        console.print(table)
        events = j.get("events") or []
        if events:
            console.print("[bold]events[/]")
            t0 = j["submit_time"]
            for e in events[-20:]:
                console.print(f"  +{e['time'] - t0:8.1f}s  {e['kind']}", highlight=False)

    @app.command(cls=OneLineErrors)
    def cancel(job_id: Annotated[str, typer.Argument(metavar="ID", help="Job id.")]) -> None:
        """Cancel a job (a running job gets SIGTERM, then SIGKILL after the grace period)."""
        with _client() as c:
            j = c.cancel(_job_id(job_id))
        console.print(f"job {j['id']}: {'cancelled' if j['state'] == 'cancelled' else 'cancelling'}")

    @app.command(cls=OneLineErrors)
    def logs(
        job_id: Annotated[str, typer.Argument(metavar="ID", help="Job id.")],
        follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing until the job ends.")] = False,
    ) -> None:
        """Print a job's output (all its runs)."""
        jid = _job_id(job_id)
        out = sys.stdout.buffer
        offset = 0
        with _client() as c:
            try:
                while True:
                    data, offset, state = c.logs(jid, offset)
                    if data:
                        out.write(data)
                        out.flush()
                    if not follow or (not data and state in FINAL_STATES):
                        break
                    if not data:
                        time.sleep(0.5)
            except KeyboardInterrupt:
                raise typer.Exit(130) from None

    @app.command(cls=OneLineErrors)
    def cluster(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
        """GPUs, what runs on each, and the queue."""
        with _client() as c:
            info = c.cluster()
        if as_json:
            print(json.dumps(info, indent=2))
            return
        counts = ", ".join(f"{n} {s}" for s, n in info["jobs"].items() if n)
        console.print(f"[bold]{info['gpus_in_use']}/{info['gpus_total']} GPUs in use[/] ({info['cluster']}, "
                      f"{info['gpu_source']}); policy {info['policy']}, placement {info['placement']}, rounds of "
                      f"{info['round_seconds']:g} s; jobs: {counts or 'none'}", highlight=False)
        table = Table(box=None, pad_edge=False)
        for col in ("GPU", "TYPE", "DEVICE", "JOBS"):
            table.add_column(col)
        for g in info["gpus"]:
            jobs_text = ", ".join(f"{j['job']} ({j['user']}{', ' + j['phase'] if j['phase'] != 'running' else ''})"
                                  for j in g["jobs"]) or "-"
            table.add_row(str(g["id"]), g["type"], g["device"], jobs_text)
        console.print(table)
