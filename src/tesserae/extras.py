"""The optional parts of Tesserae and the pip extra that brings each in.

``pip install tesserae`` is the simulator alone (NumPy, SciPy, rustworkx, Typer and Rich, pydantic,
matplotlib, Jinja2 for ``report.html``, PyYAML for queue files). Everything else is an extra:

- ``parquet``: canonical traces in Parquet (pyarrow);
- ``server``: ``tesserae server``, the client commands (``submit``, ``jobs``...) and ``tesserae view``
  (FastAPI, uvicorn, httpx);
- ``ray``: the Ray executor and ``compare --ray`` sweeps;
- ``profiler``: ``tesserae profile`` (PyTorch);
- ``gpu``: NVML, so that the server finds a machine's GPUs (nvidia-ml-py);
- ``dev``: what the test suite needs (all of the above but PyTorch, plus the test tools).

A command that needs a missing extra stops with one line naming it (``MissingExtra``, exit status 2),
before it does any work where it can tell (``require``), and otherwise when the import fails
(``tesserae.cli.main`` turns a ``ModuleNotFoundError`` of a module listed here into the same line).
"""

from __future__ import annotations

import importlib.util

from tesserae.core.errors import InputError

#: The importable top-level module of each optional dependency, and its extra.
EXTRA_OF_MODULE: dict[str, str] = {
    "pyarrow": "parquet",
    "fastapi": "server", "fastapi_offline": "server", "starlette": "server", "uvicorn": "server",
    "httpx": "server", "httpcore": "server",
    "ray": "ray",
    "torch": "profiler",
    "pynvml": "gpu",
}
#: What each extra is for, as the error line says it.
PURPOSE: dict[str, str] = {
    "parquet": "Parquet traces", "server": "the server, its client commands and the results viewer",
    "ray": "Ray", "profiler": "the profiler (PyTorch)", "gpu": "NVML (a machine's real GPUs)",
}


class MissingExtra(InputError):
    """A command needs an optional dependency that is not installed."""

    def __init__(self, extra: str, module: str, what: str | None = None, *, path: str | None = None) -> None:
        self.extra, self.module = extra, module
        needs = f"{what} needs" if what else "this needs"
        super().__init__(f"{needs} the '{extra}' extra ({PURPOSE.get(extra, extra)}; {module} is not installed): "
                         f"pip install 'tesserae[{extra}]'", path=path)


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(extra: str, what: str | None = None, *, path: str | None = None) -> None:
    """Raise MissingExtra unless every module of ``extra`` is installed."""
    for module, of in EXTRA_OF_MODULE.items():
        if of == extra and module not in ("httpcore", "starlette") and not installed(module):
            raise MissingExtra(extra, module, what, path=path)


def from_import_error(e: ModuleNotFoundError) -> MissingExtra | None:
    """The MissingExtra a failed import means, or None when the module is not an optional dependency."""
    top = (e.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    return None if extra is None else MissingExtra(extra, top)
