"""Ray's token authentication (issue 13, point 8): a head started with a token refused a server given its
explicit address (``InvalidAuthToken``, shown only as "Failed to connect") even with the token at hand.
The server now turns token mode on when a token is available, and says in one line what is missing."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.ray_cluster import PY, start_server, wait_for

RAY = str(Path(sys.executable).with_name("ray"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def token_head(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A one-node Ray cluster (1 virtual GPU) started with token authentication: (address, token)."""
    pytest.importorskip("ray")
    home = tmp_path / "home"
    home.mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "TESSERAE_"))}
    env = {**base, "HOME": str(home), "RAY_AUTH_MODE": "token"}
    subprocess.run([RAY, "get-auth-token", "--generate"], env=env, capture_output=True, check=True, timeout=60)
    token = (home / ".ray" / "auth_token").read_text().strip()
    port = _free_port()
    temp = Path(f"/tmp/tsr-ray-{os.getpid()}-{port}")
    head = subprocess.Popen([RAY, "start", "--head", "--block", "--port", str(port), "--node-ip-address", "127.0.0.1",
                             "--num-cpus", "1", "--num-gpus", "1", "--include-dashboard=false",
                             "--temp-dir", str(temp)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        def up() -> bool:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
            assert head.poll() is None, "ray start --head exited"
            return False

        wait_for(up, 60, 0.2, "the Ray head to listen")
        time.sleep(2.0)  # the raylet registers with the GCS just after it listens
        yield f"127.0.0.1:{port}", token
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(head.pid, signal.SIGKILL)
            head.wait(10)


def test_an_explicit_address_with_token_authentication(tmp_path: Path, token_head: tuple[str, str]) -> None:
    address, token = token_head
    elsewhere = tmp_path / "elsewhere"  # a HOME without ~/.ray/auth_token: the token comes from the variable
    elsewhere.mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "TESSERAE_"))}
    r = subprocess.run([PY, "-m", "tesserae.cli", "server", "--state", str(tmp_path / "refused"), "--port", "0",
                        "--executor", "ray", "--ray-address", address, "--insecure-same-user"],
                       env={**base, "HOME": str(elsewhere)}, capture_output=True, text=True, timeout=180)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "uses token authentication" in lines[0] and "RAY_AUTH_TOKEN" in lines[0]
    s = start_server(tmp_path / "state", env={"HOME": str(elsewhere), "RAY_AUTH_TOKEN": token}, timeout=120,
                     executor_args=("--executor", "ray", "--ray-address", address))
    try:
        job = s.submit([PY, "-c", "import os; print('leak' if 'RAY_AUTH_TOKEN' in os.environ else 'no token here')"])
        s.wait_state(job, "completed", timeout=60)
        assert "no token here" in s.client().get(f"/v1/jobs/{job}/logs").text
    finally:
        s.stop()
