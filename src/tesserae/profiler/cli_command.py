"""The ``tesserae profile`` command (``register(app)`` adds it to the main Typer app).

PyTorch is imported only by the worker processes, so this module is cheap to import and the
command can say clearly that PyTorch is missing.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tesserae.core.errors import InputError
from tesserae.core.restart import DEFAULT_STORAGE_GBPS, transfer_seconds
from tesserae.profiler.catalogue import MODEL_NAMES, parse_gpu_counts, parse_models

if TYPE_CHECKING:
    from tesserae.profiler.restart import RestartOutcome
    from tesserae.profiler.runner import JobOutcome, Measurement, ProfileConfig, ProfileResult

err = Console(stderr=True)


def register(app: typer.Typer) -> None:
    """Add ``profile`` to ``app``."""
    from tesserae.cli_help import TesseraeCommand

    @app.command("profile", cls=TesseraeCommand)
    def profile_cmd(
        out: Annotated[Path, typer.Option("--out", help="Profile to write (JSON, Tesserae's profile format).")],
        models: Annotated[str | None, typer.Option(
            "--models", help=f"Comma-separated models (default: all): {', '.join(MODEL_NAMES)}.")] = None,
        gpus: Annotated[str, typer.Option("--gpus", help="GPU counts to measure, e.g. 1,2 (DDP across GPUs; "
                                          "on a CPU, that many worker processes).")] = "1",
        pairs: Annotated[bool, typer.Option("--pairs", help="Also measure every pair of models sharing the "
                                            "GPUs (two processes; MPS if its daemon runs, else time-slicing).")]
        = False,
        seconds: Annotated[float, typer.Option("--seconds", help="Timed window of each measurement (s).")] = 10.0,
        warmup: Annotated[float | None, typer.Option("--warmup", help="Warm-up before the window (s; "
                                                     "default min(5, seconds)).")] = None,
        size: Annotated[str, typer.Option("--size", help="Model sizes: full, small, tiny, or auto (full on "
                                          "CUDA, small on a CPU).")] = "auto",
        device: Annotated[str, typer.Option("--device", help="auto, cuda or cpu.")] = "auto",
        cpu_threads: Annotated[int, typer.Option("--cpu-threads", help="On a CPU: cores (and threads) per "
                                                 "'GPU'.")] = 1,
        gpu_type: Annotated[str | None, typer.Option("--gpu-type", help="GPU type to write (default: from the "
                                                     "GPU's name, e.g. h100; 'cpu' on a CPU).")] = None,
        timeout: Annotated[float, typer.Option("--timeout", help="Seconds one measurement may take before its "
                                               "processes are killed.")] = 600.0,
        restart_runs: Annotated[int, typer.Option("--restart-runs", help="Fresh processes per model timing "
                                                  "start-up, checkpoint save and restore (median; 0 = skip).")] = 3,
        checkpoint_dir: Annotated[Path | None, typer.Option("--checkpoint-dir", help="Where the restart "
                                                            "measurements write checkpoints: the storage jobs "
                                                            "use (default: a temporary folder).")] = None,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress display.")] = False,
    ) -> None:
        """Measure training throughput and memory of real PyTorch models, alone and in pairs."""
        from tesserae.profiler.runner import ProfileConfig

        try:
            if timeout <= 0:
                raise InputError(f"--timeout must be positive, got {timeout}", field="timeout")
            if out.suffix.lower() != ".json":
                raise InputError("the profile is JSON: give --out a .json file name", path=str(out))
            try:
                out.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise InputError(f"cannot create the folder: {e.strerror}", path=str(out.parent)) from None
            if restart_runs < 0:
                raise InputError(f"--restart-runs must be at least 0, got {restart_runs}", field="restart-runs")
            if checkpoint_dir is not None and not checkpoint_dir.is_dir():
                raise InputError("folder not found", path=str(checkpoint_dir), field="checkpoint-dir")
            config = ProfileConfig(models=parse_models(models), gpu_counts=parse_gpu_counts(gpus), pairs=pairs,
                                   seconds=seconds, warmup=warmup, size=size, device=device,
                                   cpu_threads=cpu_threads, gpu_type=gpu_type, timeout=timeout,
                                   restart_runs=restart_runs, checkpoint_dir=checkpoint_dir)
            _profile(config, out, quiet)
        except InputError as e:
            # tesserae.cli.main prints the message as Rich markup: keep "tesserae[profiler]" from being eaten.
            raise InputError(str(e)) from None


def _profile(config: ProfileConfig, out: Path, quiet: bool) -> None:
    from tesserae.profiler.document import write_profile
    from tesserae.profiler.runner import ProfilerError, ProfileSession

    progress = None if quiet else Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[now]}"),
        TimeElapsedColumn(), console=err, transient=False)
    task = None if progress is None else progress.add_task("profiling", total=None, now="")

    def on_start(m: Measurement, i: int, total: int) -> None:
        if progress is not None and task is not None:
            progress.update(task, total=total, completed=i, now=" + ".join(m.models) + f" on {m.num_gpus}")

    def on_done(m: Measurement, outcomes: list[JobOutcome]) -> None:
        if progress is None or task is None:
            return
        text = ", ".join(f"{o.model} {'OOM' if o.oom else f'{o.throughput:.3g} it/s'}" for o in outcomes)
        progress.console.print(f"  {' + '.join(m.models)} on {m.num_gpus}: {text}", highlight=False)
        progress.advance(task)

    def on_restart(o: RestartOutcome) -> None:
        if progress is not None:
            progress.console.print(f"  {o.model} restart: start-up {o.startup_seconds:.2f} s, checkpoint "
                                   f"{o.checkpoint_bytes / 1e6:.3g} MB", highlight=False)

    # On SIGTERM, unwind (the worker pool kills its processes and removes its files) instead of dying.
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        # Every check (models, PyTorch, device, GPU counts) before the progress display is drawn.
        with ProfileSession(config) as session:
            if progress is not None:
                with progress:
                    result = session.measure(on_start=on_start, on_done=on_done, on_restart=on_restart)
            else:
                result = session.measure()
    except ProfilerError as e:
        err.print(f"[red]error:[/red] {escape(str(e))}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    write_profile(result, out)
    _print_tables(result, out)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _print_tables(result: ProfileResult, out: Path) -> None:
    console = Console(width=None if sys.stdout.isatty() else 160)
    d = result.device
    table = Table(title=f"{d.name} ({d.gpu_type}; driver {d.driver}; PyTorch {d.torch_version}; "
                  f"size {result.size})")
    for col in ("model", "GPUs", "it/s alone", "peak memory (GiB)"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for (model, n), o in result.solo.items():
        table.add_row(model, str(n), "OOM" if o.oom else f"{o.throughput:.4g}",
                      "-" if o.memory_gb is None else f"{o.memory_gb:.3f}")
    console.print(table)
    if result.pairs:
        ptable = Table(title=f"pairs sharing the GPUs ({d.sharing})")
        for col in ("job", "partner", "GPUs", "it/s (x alone)", "partner it/s (x alone)"):
            ptable.add_column(col, justify="right" if "it/s" in col or col == "GPUs" else "left")
        for (a, b, n), (oa, ob) in result.pairs.items():
            cells = []
            for o in (oa, ob):
                solo = result.solo[(o.model, n)].throughput
                if oa.oom or ob.oom:
                    cells.append("OOM")
                else:
                    cells.append(f"{o.throughput:.4g}" + (f" ({o.throughput / solo:.2f})" if solo > 0 else ""))
            ptable.add_row(a, b, str(n), *cells)
        console.print(ptable)
    if result.restart:
        runs = result.config.restart_runs
        rtable = Table(title=f"restart cost (median of {runs} fresh process{'es' if runs > 1 else ''}; "
                       "checkpoint = model + optimizer state)")
        for col in ("model", "start-up (s)", "checkpoint (MB)", "save (s)", "restore (s)",
                    f"restart at {DEFAULT_STORAGE_GBPS:g} Gbit/s (s)"):
            rtable.add_column(col, justify="left" if col == "model" else "right")
        for o in result.restart.values():
            rtable.add_row(o.model, f"{o.startup_seconds:.3g}", f"{o.checkpoint_bytes / 1e6:.4g}",
                           f"{o.save_seconds:.3g}", f"{o.restore_seconds:.3g}",
                           f"{o.startup_seconds + transfer_seconds(o.checkpoint_bytes, DEFAULT_STORAGE_GBPS):.3g}")
        console.print(rtable)
    console.print(f"wrote {out} ({len(result.solo)} alone, {len(result.pairs)} pairs, "
                  f"{len(result.restart)} restart costs)")
