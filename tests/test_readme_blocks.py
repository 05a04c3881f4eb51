"""Every command block of the README runs as written (issue 30), from a fresh clone's layout: a copy of
the repository's examples at some path with the reference data at ``../shared`` beside it, HOME a
fresh folder, the installed ``tesserae`` first on PATH.

Each ``bash`` block is either run here or named, with its test, in ``ELSEWHERE``; a block that is
neither fails ``test_every_block_is_run_by_a_test``, so a new block needs a test. The only changes
made to a block before it runs: a server's port (and the URL naming it) becomes a free one, and
``tesserae view DIR`` (which serves until stopped) is checked to serve the page, then stopped. The
``yaml`` block is saved as the file it names (``queues.yaml``), as the README tells the reader to.
Blocks that take more than a few seconds are marked ``slow``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
BIN = Path(sys.executable).parent

#: Blocks run by other tests: (heading, index of the block under it) -> (the test file, a text it holds that
#: shows it runs the block, why the block is run there).
ELSEWHERE: dict[tuple[str, int], tuple[str, str, str]] = {
    ("# Tesserae", 0): ("Makefile", "demo:", "make demo and make test, the project's two commands: run by CI and "
                        "measured by hand (a test cannot run the suite it belongs to)"),
    ("### Plug-ins: your own policy or placement", 0): (
        "tests/test_plugins.py", "examples/plugin", "the example installed into a temporary folder (not into "
        "the test's own environment) and run through the same CLI commands"),
    ("### Running real jobs", 0): ("tests/runtime/test_runtime_readme.py", "### Running real jobs", "pasted whole"),
    ("### Waiting jobs, lifecycle controls and accounting", 0): (
        "tests/runtime/test_runtime_readme.py", "### Waiting jobs, lifecycle controls", "pasted whole"),
    ("### Waiting jobs, lifecycle controls and accounting", 1): (
        "tests/runtime/test_runtime_readme.py", "### Waiting jobs, lifecycle controls", "pasted whole"),
    ("### A Slurm site: its own history, then its partition", 0): (
        "tests/traces/test_slurm_readme.py", "### A Slurm site", "pasted whole, a synthetic sacct dump in its place"),
}


def blocks(lang: str = "bash") -> dict[tuple[str, int], str]:
    """The README's fenced blocks of ``lang``, by the heading above them and their index under it."""
    out: dict[tuple[str, int], str] = {}
    heading = ""
    counts: dict[str, int] = {}
    lines = (REPO / "README.md").read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#") and not line.startswith("#!"):
            heading = line.strip()
        fence = re.match(r"^```(\w+)$", line)
        if fence:
            end = lines.index("```", i + 1)
            if fence.group(1) == lang:
                n = counts.get(heading, 0)
                counts[heading] = n + 1
                out[(heading, n)] = "\n".join(lines[i + 1:end]) + "\n"
            i = end
        i += 1
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """``tmp/repo`` (the examples the blocks run) with ``tmp/shared`` beside it; HOME is ``tmp/home``."""
    if not (SHARED / "data").is_dir():
        pytest.skip(f"reference data folder {SHARED / 'data'} is missing (it lies beside the checkout in CI)")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "examples").symlink_to(REPO / "examples")
    (tmp_path / "shared").symlink_to(SHARED)
    (tmp_path / "home").mkdir()
    return repo


def run_block(repo: Path, script: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERAE_")}
    env.update(HOME=str(repo.parent / "home"), PATH=f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}", COLUMNS="160")
    r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=repo, env=env, capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    return r


def test_every_block_is_run_by_a_test() -> None:
    found = blocks()
    here = {key for key in found if key not in ELSEWHERE}
    assert here == set(RUN_HERE), f"README bash blocks with no test: {sorted(here - set(RUN_HERE))}; " \
                                  f"tests of blocks that are gone: {sorted(set(RUN_HERE) - here)}"
    for key, (path, marker, _) in ELSEWHERE.items():
        assert key in found, f"ELSEWHERE names a block that is gone: {key}"
        assert marker in (REPO / path).read_text(), (key, path)
    assert set(blocks("yaml")) == {("### Shared clusters: tenant queues", 0)}  # queues.yaml


COMMAND_LINE = ("### The command line", 0)
TIRESIAS = ("### Tiresias", 0)
GAVEL = ("### Gavel", 0)
PACKING = ("### Tesserae placement and packing", 0)
DERIVED_QUEUES = ("### Shared clusters: tenant queues", 0)
QUEUES = ("### Shared clusters: tenant queues", 1)
PAGES = ("### Pages", 0)
RUN_HERE = (COMMAND_LINE, TIRESIAS, GAVEL, PACKING, DERIVED_QUEUES, QUEUES, PAGES)


@pytest.mark.slow
def test_the_command_line_block(clone: Path) -> None:
    r = run_block(clone, blocks()[COMMAND_LINE])
    assert (clone / "out" / "60job" / "report.html").is_file() and (clone / "out" / "gen" / "jobs.csv").is_file()
    assert (clone / "out" / "cmp" / "compare.csv").is_file() and (clone / "out" / "60job.parquet").is_file()
    assert "srtf:first-fit" in r.stdout


@pytest.mark.slow
@pytest.mark.readme_long
def test_the_tiresias_block(clone: Path) -> None:
    run_block(clone, blocks()[TIRESIAS], timeout=1800)  # the whole Philly trace
    s = json.loads((clone / "out" / "tiresias" / "summary.json").read_text())
    assert s["policy"] == "tiresias-las" and s["completed"] > 80_000
    assert json.loads((clone / "out" / "gittins" / "summary.json").read_text())["policy"] == "tiresias-gittins"


def test_the_gavel_block(clone: Path) -> None:
    """Issue 30: it named no trace, and with Gavel's shipped trace it stopped at the CycleGAN job on 8 GPUs;
    on its cluster of 4 GPUs per type the trace's other 8-GPU jobs could never run (one type per job)."""
    r = run_block(clone, blocks()[GAVEL])
    s = json.loads((clone / "out" / "gavel" / "summary.json").read_text())
    assert s["policy"] == "gavel-maxmin" and s["jobs"] == s["completed"] == 8
    assert "'CycleGAN' on 8 GPUs" in r.stderr  # the warning names what was left out


@pytest.mark.slow
@pytest.mark.readme_long
def test_the_packing_block(clone: Path) -> None:
    r = run_block(clone, blocks()[PACKING], timeout=1800)  # 4 x 400 jobs with Gavel's LP: > 600 s at load 50
    assert "las:tesserae+packing" in r.stdout and (clone / "out" / "hetero" / "timeline.png").is_file()


@pytest.mark.slow
@pytest.mark.readme_long
def test_the_derived_tenant_queue_block(clone: Path) -> None:
    """Philly's virtual clusters as queues: three replays of the whole Philly trace (the longest block)."""
    r = run_block(clone, blocks()[DERIVED_QUEUES], timeout=1800)
    runs = sorted(p.parent.name for p in (clone / "out" / "tenants").glob("*/queues.csv"))
    assert len(runs) == 3 and r.returncode == 0, runs  # las+global, las+strict, las: a folder each
    for run in runs:  # each with its per-queue metrics (compare prints the summary; simulate prints queues)
        lines = (clone / "out" / "tenants" / run / "queues.csv").read_text().splitlines()
        assert lines[0].startswith("queue,") and len(lines) > 2, (run, lines[:2])


@pytest.mark.slow
def test_the_tenant_queue_file_block(clone: Path) -> None:
    """Issue 30: the README's queues.yaml stopped the README's own commands ('GPU type a100 is not in the
    cluster (v100)'). The file, saved as its first line says, works with the simulator and the server."""
    (clone / "queues.yaml").write_text(blocks("yaml")[("### Shared clusters: tenant queues", 0)])
    port = _free_port()
    block = blocks()[QUEUES]
    assert block.count("8766") == 2 and "--detach" in block
    script = block.replace("8766", str(port))
    try:
        r = run_block(clone, script)
    finally:
        with contextlib.suppress(OSError, ValueError, ProcessLookupError):
            pid = json.loads((clone.parent / "home" / "tesserae-queues" / "server.json").read_text())["pid"]
            os.kill(pid, signal.SIGTERM)
            for _ in range(300):
                os.kill(pid, 0)
                time.sleep(0.1)
    summary = json.loads((clone / "out" / "q" / "summary.json").read_text())
    assert {q["queue"] for q in summary["queues"]} >= {"research", "vision", "nlp", "interns"}
    assert "research/vision" in r.stdout and "nlp" in r.stdout and "under las" in r.stdout
    assert re.search(r"queue\s+vision \(production\)", r.stdout), r.stdout[-3000:]


def test_the_pages_block(clone: Path) -> None:
    """The compare runs as written; 'tesserae view' serves the page until stopped: it is started, asked
    for the page, and stopped (on a free port)."""
    block = blocks()[PAGES]
    lines = [ln for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]
    view = [ln for ln in lines if ln.startswith("tesserae view ")]
    assert len(view) == 1 and view[0].split("#")[0].split() == ["tesserae", "view", "out/cmp"]
    run_block(clone, "\n".join(ln for ln in lines if ln not in view))
    assert (clone / "out" / "cmp" / "report.html").is_file()
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERAE_")}
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    p = subprocess.Popen(["bash", "-c", f"exec {view[0].split('#')[0].strip()} --port {port}"], cwd=clone,
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        page = ""
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
                    page = resp.read().decode()
                break
            except OSError:
                assert p.poll() is None, p.stdout.read().decode() if p.stdout else ""
                time.sleep(0.1)
        assert "tiresias-las:tiresias" in page
    finally:
        p.terminate()
        p.wait(timeout=30)
