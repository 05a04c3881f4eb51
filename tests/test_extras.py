"""The install is split into extras (issue 30): ``pip install tesserae`` is the simulator alone, and a
command that needs a missing extra says which, in one line, with exit status 2 (never a traceback).

The extras are made missing here by an import hook that refuses their modules (what a virtual
environment without them does), so the same checks run in the dev environment; the README's
install section gives the measured sizes of a real simulator-only environment (``make demo``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tesserae.extras import EXTRA_OF_MODULE

REPO = Path(__file__).resolve().parents[1]
#: Every optional dependency's module: with all of them refused, what is left is `pip install tesserae`.
OPTIONAL = sorted(EXTRA_OF_MODULE)

_RUN = """
import sys
from importlib.abc import MetaPathFinder

class Missing(MetaPathFinder):
    def __init__(self, names): self.names = set(names)
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None

sys.meta_path.insert(0, Missing(sys.argv[1].split(",")))
sys.argv = ["tesserae", *sys.argv[2:]]
from tesserae.cli import main
main()
"""


def without(missing: list[str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``tesserae ARGS`` in a Python where the modules ``missing`` cannot be imported."""
    return subprocess.run([sys.executable, "-c", _RUN, ",".join(missing), *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def one_line(r: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stdout + r.stderr
    return lines[0]


def test_the_base_install_is_the_simulator_and_every_extra_is_declared() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    base = {d.split(">")[0].split("=")[0].strip() for d in project["dependencies"]}
    assert base == {"numpy", "scipy", "rustworkx", "typer", "rich", "pydantic", "matplotlib", "jinja2", "pyyaml"}
    extras = project["optional-dependencies"]
    assert {"parquet", "server", "ray", "profiler", "gpu", "dev"} <= extras.keys()
    assert set(EXTRA_OF_MODULE.values()) <= extras.keys()
    assert any(d.startswith("tesserae[") and "server" in d and "ray" in d and "parquet" in d for d in extras["dev"])


def test_importing_the_cli_loads_no_optional_dependency() -> None:
    code = ("import sys, tesserae.cli; print(sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[1:])))")
    r = subprocess.run([sys.executable, "-c", code, *OPTIONAL, "scipy", "matplotlib"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def test_the_simulator_runs_with_no_extra(tmp_path: Path) -> None:
    """simulate, compare (the demo's command, smaller), trace info and convert to CSV, with every optional
    module refused."""
    r = without(OPTIONAL, "compare", "--run", "fifo(no-backfill)", "--run", "tiresias-las:tiresias", "--run",
                "las:tesserae+packing", "--jobs", "40", "--load", "1.5", "--cluster", "4x4", "--seed", "1",
                "--out", str(tmp_path / "demo"), "-q")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "demo" / "report.html").stat().st_size > 10_000 and (tmp_path / "demo" / "jct_cdf.png").exists()
    r = without(OPTIONAL, "simulate", "--jobs", "30", "--out", str(tmp_path / "sim"), "-q")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "sim" / "summary.json").read_text())["completed"] == 30
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,submit_time,num_gpus,job_type,work\n0,0,1,resnet50,10\n1,5,2,vgg19,20\n")
    r = without(OPTIONAL, "trace", "info", str(trace), "--cluster", "2x4")
    assert r.returncode == 0 and "GPU-count mix" in r.stdout, r.stderr
    r = without(OPTIONAL, "trace", "convert", str(trace), "--out", str(tmp_path / "copy.csv"))
    assert r.returncode == 0 and (tmp_path / "copy.csv").read_text().count("\n") == 3, r.stderr


@pytest.mark.parametrize(("args", "missing", "extra"), [
    (["server", "--virtual-gpus", "1", "--state", "{tmp}/state"], ["fastapi"], "server"),
    (["server", "--virtual-gpus", "1", "--state", "{tmp}/state"], ["uvicorn"], "server"),
    (["jobs"], ["httpx"], "server"),
    (["submit", "--", "true"], ["httpx"], "server"),
    (["view", "{tmp}"], ["fastapi"], "server"),
    (["compare", "--run", "fifo", "--jobs", "5", "--ray", "local", "--out", "{tmp}/o"], ["ray"], "ray"),
    (["trace", "convert", "{trace}", "--out", "{tmp}/t.parquet"], ["pyarrow"], "parquet"),
    (["simulate", "--trace", "{tmp}/t.parquet", "--out", "{tmp}/o"], ["pyarrow"], "parquet"),
])
def test_a_command_without_its_extra_names_it_in_one_line(tmp_path: Path, args: list[str], missing: list[str],
                                                         extra: str) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,submit_time,num_gpus,job_type,work\n0,0,1,resnet50,10\n")
    (tmp_path / "t.parquet").write_bytes(b"PAR1")
    argv = [a.format(tmp=tmp_path, trace=trace) for a in args]
    line = one_line(without(missing, *argv, cwd=tmp_path))
    assert f"pip install 'tesserae[{extra}]'" in line and f"'{extra}' extra" in line, line
    assert not (tmp_path / "state").exists() and not (tmp_path / "o").exists()


def test_the_profiler_without_pytorch_names_its_extra(tmp_path: Path) -> None:
    line = one_line(without(["torch"], "profile", "--out", str(tmp_path / "p.json"), "--models", "resnet18"))
    assert "tesserae[profiler]" in line


def test_make_test_lists_skipped_tests_with_reasons() -> None:
    makefile = (REPO / "Makefile").read_text()
    test_recipe = makefile[makefile.index("\ntest:"):].split("\n\n")[0]
    assert " -rs " in test_recipe and "pytest" in test_recipe
    demo = makefile[makefile.index("$(DEMO_STAMP):"):].split("\n\n")[0]
    assert "-e ." in demo and "[dev]" not in demo and "torch" not in demo
