"""Measuring what a restart costs: process start-up, checkpoint save and restore (DESIGN §5).

Each run is a *fresh* interpreter (``python -m tesserae.profiler.restart SPEC``), not a child of
the profiler's zygote, because importing PyTorch is part of what a restarting job pays:

- **start-up**: from launching the process to the model and its optimizer built on the device
  (interpreter, ``import torch``, the catalogue's build, the CUDA context on a GPU), timed by the
  parent from ``Popen`` to the child's first line;
- the child then trains one step (so the optimizer has its state: momentum buffers, Adam's
  moments), and times **save**: ``torch.save`` of every module's and optimizer's state dict to a
  file in the checkpoint folder, flushed and fsync'ed; the file's size is the **checkpoint
  bytes**;
- **restore**: the file's pages are dropped from the page cache (``posix_fadvise DONTNEED``, so the
  read comes from storage where the system honours it), then ``torch.load`` onto the device and
  ``load_state_dict`` of every module and optimizer, synchronised.

The simulator charges start-up + checkpoint bytes / ``--storage-gbps``; save and restore seconds
are provenance (how fast the storage the profile was measured on is). Point ``--checkpoint-dir``
at the storage jobs will really use to measure it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class RestartError(RuntimeError):
    """A restart measurement failed (the child crashed, hung or printed nonsense)."""


@dataclass(frozen=True)
class RestartOutcome:
    """One model's restart figures (medians over the runs)."""

    model: str
    startup_seconds: float
    save_seconds: float
    restore_seconds: float
    checkpoint_bytes: int
    parameters: int
    runs: int


def measure_restart(model: str, size: str, device: str, *, runs: int = 3, cores: list[int] | None = None,
                    threads: int = 1, checkpoint_dir: Path | None = None, timeout: float = 600.0,
                    python: str = sys.executable) -> RestartOutcome:
    """``runs`` fresh processes for ``model``; each figure is the median over them."""
    if runs < 1:
        raise ValueError("runs must be at least 1")
    results = [_one_run(model, size, device, cores, threads, checkpoint_dir, timeout, python) for _ in range(runs)]
    sizes = {r["checkpoint_bytes"] for r in results}
    return RestartOutcome(
        model=model,
        startup_seconds=statistics.median(r["startup_seconds"] for r in results),
        save_seconds=statistics.median(r["save_seconds"] for r in results),
        restore_seconds=statistics.median(r["restore_seconds"] for r in results),
        checkpoint_bytes=max(sizes), parameters=int(results[0]["parameters"]), runs=runs)


def _one_run(model: str, size: str, device: str, cores: list[int] | None, threads: int,
             checkpoint_dir: Path | None, timeout: float, python: str) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="tesserae-restart-", dir=checkpoint_dir))
    log_path = folder / "child.log"
    spec = {"model": model, "size": size, "device": device, "cores": cores, "threads": threads,
            "checkpoint": str(folder / "checkpoint.pt")}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        with log_path.open("w") as log:
            start = time.perf_counter()
            # -P: the working folder is not put on sys.path (a stray timeit.py there would shadow the stdlib).
            proc = subprocess.Popen([python, "-P", "-m", "tesserae.profiler.restart", json.dumps(spec)],
                                    stdout=subprocess.PIPE, stderr=log, text=True, env=env)
            try:
                deadline = time.monotonic() + timeout
                built = _read_event(proc, deadline, log_path)
                startup = time.perf_counter() - start
                if built.get("event") != "built":
                    raise RestartError(f"{model}: expected the 'built' line, got {built}")
                result = _read_event(proc, deadline, log_path)
                if result.get("event") != "result":
                    raise RestartError(f"{model}: expected the 'result' line, got {result}")
                proc.wait(max(1.0, deadline - time.monotonic()))
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                if proc.stdout is not None:
                    proc.stdout.close()
        return {"startup_seconds": startup, **{k: result[k] for k in (
            "save_seconds", "restore_seconds", "checkpoint_bytes", "parameters")}}
    finally:
        for p in folder.iterdir():
            with contextlib.suppress(OSError):
                p.unlink()
        with contextlib.suppress(OSError):
            folder.rmdir()


def _read_event(proc: subprocess.Popen[str], deadline: float, log_path: Path) -> dict[str, Any]:
    out = proc.stdout
    assert out is not None
    left = deadline - time.monotonic()
    ready, _, _ = select.select([out], [], [], max(0.0, left))
    line = out.readline() if ready else ""
    if not line:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            raise RestartError(f"the restart measurement did not answer in time; log: {_tail(log_path)}")
        raise RestartError(f"the restart measurement exited with status {proc.returncode}; log: {_tail(log_path)}")
    try:
        event = json.loads(line)
    except json.JSONDecodeError:
        raise RestartError(f"the restart measurement printed {line.strip()[:200]!r}") from None
    if event.get("event") == "error":
        raise RestartError(str(event.get("message", "unknown error")))
    return dict(event)


def _tail(path: Path, lines: int = 6) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept) if kept else "(no output)"


# ------------------------------------------------------------------------------------------ child
def _child(spec: dict[str, Any]) -> None:
    import torch

    from tesserae.profiler.models import build

    cuda = spec["device"] == "cuda"
    if cuda:
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        if spec.get("cores") and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, set(spec["cores"]))
    torch.set_num_threads(int(spec.get("threads") or 1))

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    job = build(spec["model"], spec["size"], device)
    sync()
    _say(event="built")

    job.step()  # the optimizer's state exists only after a first step
    sync()
    path = Path(spec["checkpoint"])
    state = {"modules": [m.state_dict() for m in job.modules],
             "optimizers": [o.state_dict() for o in job.optimizers]}
    t0 = time.perf_counter()
    with path.open("wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    save = time.perf_counter() - t0
    size = path.stat().st_size
    del state
    fd = os.open(path, os.O_RDONLY)
    try:
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    t0 = time.perf_counter()
    loaded = torch.load(path, map_location=device, weights_only=True)
    for module, sd in zip(job.modules, loaded["modules"], strict=True):
        module.load_state_dict(sd)
    for opt, sd in zip(job.optimizers, loaded["optimizers"], strict=True):
        opt.load_state_dict(sd)
    sync()
    restore = time.perf_counter() - t0
    _say(event="result", save_seconds=save, restore_seconds=restore, checkpoint_bytes=size, parameters=job.parameters)


def _say(**event: Any) -> None:
    print(json.dumps(event), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tesserae.profiler.restart SPEC_JSON", file=sys.stderr)
        return 2
    try:
        _child(json.loads(args[0]))
    except Exception as exc:  # reported to the parent as one line; the traceback goes to the log
        import traceback

        traceback.print_exc()
        _say(event="error", message=f"{type(exc).__name__}: {exc}"[:500])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
