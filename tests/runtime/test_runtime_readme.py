"""The README's "Running real jobs" block works pasted whole (issue 13, point 8). Before, it read
``admin.token`` before the server (started with ``&``) had written it; ``--detach`` returns only once
the server answers. Only the port (a free one), HOME and the job's length are changed here."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

from support.server import REPO, wait_for
from tesserae.runtime.launch import procs


def _readme_block() -> str:
    text = (REPO / "README.md").read_text()
    section = text[text.index("### Running real jobs"):]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_running_real_jobs_block_works_pasted_whole(tmp_path: Path) -> None:
    block = _readme_block()
    port = _free_port()
    assert "--detach" in block and "8765" in block
    script = (block.replace("--detach", f"--detach --port {port}").replace("8765", str(port))
              .replace("--iterations 400", "--iterations 10").replace("0.05", "0.01"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERAE_")}
    env.update(HOME=str(tmp_path), PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}")
    state = tmp_path / "tesserae-state"
    try:
        r = subprocess.run(["bash", "-e", "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "toy: done, 10 iterations" in r.stdout, r.stdout
        assert "running in the background" in r.stderr
        assert (state / "server.log").exists()
    finally:
        with contextlib.suppress(OSError, ValueError, ProcessLookupError):
            pid = json.loads((state / "server.json").read_text())["pid"]
            os.kill(pid, signal.SIGTERM)
            wait_for(lambda: procs.start_ticks(pid) is None, 30, 0.1, "the detached server to stop")


def _block_after(heading: str, index: int = 0) -> str:
    text = (REPO / "README.md").read_text()
    section = text[text.index(heading):]
    return re.findall(r"```bash\n(.*?)```", section, re.S)[index]


def test_the_lifecycle_and_accounting_blocks_work_pasted_whole(tmp_path: Path) -> None:
    """Issue 14: the README's lifecycle block, after the block that starts the server, as pasted (a free
    port, a 3 s time limit, shorter jobs); then its simulator block."""
    port = _free_port()
    start = (_readme_block().replace("--detach", f"--detach --port {port}").replace("8765", str(port))
             .replace("--iterations 400", "--iterations 10").replace("0.05", "0.01"))
    block = _block_after("### Waiting jobs, lifecycle controls").replace("--time-limit 20s", "--time-limit 3s")
    assert "--time-limit 3s" in block and "--array 0-3" in block and "--gpu-type v100 --cpus 2 --memory 4G" in block
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERAE_")}
    env.update(HOME=str(tmp_path), PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}")
    state = tmp_path / "tesserae-state"
    try:
        r = subprocess.run(["bash", "-e", "-c", start + block], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        out = r.stdout
        assert "ended: timed-out (exit code 75)" in out, out
        assert all(f"task {i}" in out for i in range(4)), out
        assert "has not started yet (queued, held (tesserae release" in r.stderr, r.stderr
        assert "GPU-H" in out and "GPU-hours from" in out and "total" in out, out
        assert re.search(r"later +admin +queued .* held", out), out[:3000]  # a waiting job says why it waits
    finally:
        with contextlib.suppress(OSError, ValueError, ProcessLookupError):
            pid = json.loads((state / "server.json").read_text())["pid"]
            os.kill(pid, signal.SIGTERM)
            wait_for(lambda: procs.start_ticks(pid) is None, 30, 0.1, "the detached server to stop")
    sim = _block_after("### Waiting jobs, lifecycle controls", 1)
    r = subprocess.run(["bash", "-e", "-c", sim], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "failed / timed out / cancelled / retries" in r.stdout and "0 / 1 / 0 / 2" in r.stdout, r.stdout
    assert "outcome,retries" in (tmp_path / "out" / "lifecycle" / "jobs.csv").read_text().splitlines()[0]
