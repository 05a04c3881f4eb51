"""Bad input to `tesserae server --executor ray`: one clear line on stderr, a non-zero exit, no traceback,
and nothing created in the state folder. (No Ray cluster needed.)"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from support.ray_cluster import PY


def _server(state: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("TESSERAE_")}
    return subprocess.run([PY, "-m", "tesserae.cli", "server", "--state", str(state), "--port", "0", *args],
                          capture_output=True, text=True, env={**base, **(env or {})}, timeout=60)


def _one_error_line(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode != 0
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_ray_address_is_one_line_and_fast(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    state = tmp_path / "state"
    line = _one_error_line(_server(state, "--executor", "ray", "--ray-address", f"127.0.0.1:{_closed_port()}"))
    assert "cannot reach the Ray cluster at '127.0.0.1:" in line
    assert not state.exists()


@pytest.mark.parametrize(("args", "says"), [
    (["--executor", "ray", "--ray-address", "no-port-here"], "is not a Ray address"),
    (["--executor", "ray", "--ray-address", "127.0.0.1:6379", "--virtual-gpus", "2"], "ray start --num-gpus"),
    (["--ray-address", "127.0.0.1:6379"], "--ray-address goes with --executor ray"),
    (["--master-ports", "29500-29599"], "--master-ports goes with --executor ray"),
    (["--executor", "ray", "--master-ports", "80-90"], "'80-90': the range must lie within 1024-65535"),
    (["--executor", "ray", "--master-ports", "29500"], "'29500' is not a port range LOW-HIGH"),
    (["--executor", "kubernetes"], "unknown executor 'kubernetes'; choose local, ray or slurm"),
])
def test_inconsistent_options_are_one_line(tmp_path: Path, args: list[str], says: str) -> None:
    if "--executor" in args and "ray" in args:
        pytest.importorskip("ray")
    state = tmp_path / "state"
    assert says in _one_error_line(_server(state, *args))
    assert not state.exists()


def test_ray_executor_without_ray_installed_says_how_to_get_it(tmp_path: Path) -> None:
    shim = tmp_path / "shim" / "ray"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('No module named ray (test shim)')\n")
    state = tmp_path / "state"
    line = _one_error_line(_server(state, "--executor", "ray", env={"PYTHONPATH": str(shim.parent)}))
    assert "needs Ray, which is not installed" in line and "pip install 'tesserae[ray]'" in line
    assert not state.exists()
