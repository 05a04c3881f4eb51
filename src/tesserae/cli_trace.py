"""``tesserae trace``: read, convert, import (``cli_import``) and describe traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from tesserae.cli_help import TesseraeCommand, TesseraeGroup
from tesserae.cli_render import console
from tesserae.cli_sim_options import FormatOpt, ProfileOpt, UnprofiledOpt

#: A trace's seed draws only the job types the trace does not give; nothing is generated.
TraceSeedOpt = Annotated[int, typer.Option("--seed", help="Seed that draws the job types a trace does not give: "
                                           "a Philly trace's (its rows name no model) and a Slurm dump's jobs whose "
                                           "name is no job type; the other formats ignore it.")]

trace_app = typer.Typer(cls=TesseraeGroup, no_args_is_help=True, rich_markup_mode=None,
                        help="Read, convert and describe traces.")


def register(app: typer.Typer) -> None:
    from tesserae.cli_import import register as register_import

    register_import(trace_app, console)  # trace import slurm
    app.add_typer(trace_app, name="trace")


@trace_app.command("info", cls=TesseraeCommand)
def trace_info_cmd(
    path: Annotated[Path, typer.Argument(help="Trace file.")],
    format: FormatOpt = "canonical",
    cluster: Annotated[str | None, typer.Option("--cluster", help="Report the offered load on this cluster.")]
    = None,
    profile: ProfileOpt = None, seed: TraceSeedOpt = 0, unprofiled_jobs: UnprofiledOpt = "refuse",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Job count, GPU-count mix, duration quantiles and offered load of a trace."""
    from tesserae.profiles.loader import load_profile
    from tesserae.sim.workload import check_cluster
    from tesserae.traces import read_trace
    from tesserae.traces.cluster_file import load_cluster
    from tesserae.traces.info import trace_info

    model = load_profile(profile)
    cl = load_cluster(cluster) if cluster else None
    if cl is not None:
        check_cluster(cl, model)
    specs = read_trace(path, format, model, seed=seed, unprofiled=unprofiled_jobs)
    info = trace_info(specs, cl, model=model)
    if as_json:
        console.print_json(json.dumps(info))
        return
    from tesserae.cli_render import render

    table = Table(title=escape(f"{path} ({format})"), show_header=False, show_lines=True)
    for k, v in info.items():
        table.add_row(_INFO_LABELS.get(k, k), render(v, k, index_label="GPUs" if k == "gpu_mix" else ""))
    console.print(table)


_INFO_LABELS = {"gpu_mix": "GPU-count mix", "duration": "duration (s)", "gpu_seconds": "GPU-seconds",
                "first_submit": "first submit (s)", "last_submit": "last submit (s)", "span": "span (s)",
                "job_types": "job types"}


@trace_app.command("convert", cls=TesseraeCommand)
def trace_convert_cmd(
    path: Annotated[Path, typer.Argument(help="Input trace.")],
    out: Annotated[Path, typer.Option("--out", help="Canonical output: .csv or .parquet.")],
    format: FormatOpt = "canonical", profile: ProfileOpt = None, seed: TraceSeedOpt = 0,
    unprofiled_jobs: UnprofiledOpt = "refuse",
) -> None:
    """Convert a trace into the canonical format (CSV or Parquet, by the output suffix)."""
    from tesserae.profiles.loader import load_profile
    from tesserae.traces import read_trace
    from tesserae.traces.canonical import write_canonical

    specs = read_trace(path, format, load_profile(profile), seed=seed, unprofiled=unprofiled_jobs)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_canonical(specs, out)
    console.print(f"wrote {len(specs)} jobs to {out}")
