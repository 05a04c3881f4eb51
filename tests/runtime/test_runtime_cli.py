"""The `tesserae` client commands against a real server, and their one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.cli import one_line_error, run_here
from support.server import PY, STATES, Server, toy

CLI = [sys.executable, "-m", "tesserae.cli"]


def run(args: list[str], env: dict[str, str], timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=timeout)


def test_submit_watch_and_cancel_with_the_cli(shared_server: Server, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    env = shared_server.env()
    p = run(["submit", "--gpus", "1", "--name", "cli-toy", "--type", "resnet50", "--iterations", "20", "--",
             *toy(20, 0.02)], env)
    assert p.returncode == 0, p.stderr
    job_id = int(p.stdout.strip())
    p = run(["logs", str(job_id), "-f"], env)  # follows until the job ends
    assert p.returncode == 0 and "toy: done, 20 iterations" in p.stdout
    p = run(["show", str(job_id), "--json"], env)
    j = json.loads(p.stdout)
    assert j["state"] == "completed" and j["state"] in STATES
    assert j["name"] == "cli-toy" and j["job_type"] == "resnet50" and j["iterations_done"] == 20

    def here(*args: str) -> subprocess.CompletedProcess[str]:
        return run_here(list(args), env, monkeypatch, capsys)

    p = here("show", str(job_id))
    assert p.returncode == 0 and "completed" in p.stdout and "cli-toy" in p.stdout
    assert job_id in [x["id"] for x in json.loads(here("jobs", "--json").stdout)]
    assert "cli-toy" in here("jobs").stdout

    long_id = int(here("submit", "--gpus", "2", "--", *toy(1000, 0.05)).stdout)
    shared_server.wait_state(long_id, "running")
    p = here("cluster")
    assert p.returncode == 0 and "2/2 GPUs in use" in p.stdout
    info = json.loads(here("cluster", "--json").stdout)
    assert [g["jobs"][0]["job"] for g in info["gpus"]] == [long_id, long_id]
    p = here("cancel", str(long_id))
    assert p.returncode == 0 and f"job {long_id}: cancelling" in p.stdout
    shared_server.wait_state(long_id, "cancelled")
    assert "already cancelled" in one_line_error(here("cancel", str(long_id)))


def test_tokens_and_the_config_file(shared_server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    env = shared_server.env()
    p = run(["token", "create", "--user", "carol", "--state", str(shared_server.state)], env)
    assert p.returncode == 0, p.stderr
    carol = p.stdout.strip()
    assert carol.startswith("tsr_") and "shown once" in p.stderr
    p = run_here(["token", "create", "--user", "dave"], env, monkeypatch, capsys)  # through the API
    dave = p.stdout.strip()
    assert p.returncode == 0 and dave.startswith("tsr_")
    config = tmp_path / "client.toml"
    token_file = tmp_path / "carol.token"
    token_file.write_text(carol + "\n")
    config.write_text(f'url = "{shared_server.url}"\ntoken_file = "{token_file}"\n')
    cfg_env = {k: v for k, v in env.items() if k not in ("TESSERAE_URL", "TESSERAE_TOKEN")}
    cfg_env["TESSERAE_CONFIG"] = str(config)
    job_id = int(run(["submit", "--", PY, "-c", "print('carol was here')"], cfg_env).stdout)
    assert shared_server.wait_state(job_id, "completed")["user"] == "carol"
    dave_env = {**env, "TESSERAE_TOKEN": dave}

    def error(*args: str) -> str:
        return one_line_error(run_here(list(args), dave_env, monkeypatch, capsys))

    assert "belongs to another user" in error("show", str(job_id))
    assert "belongs to another user" in error("cancel", str(job_id))
    assert "only an admin" in error("token", "create", "--user", "eve")


@pytest.mark.parametrize(("args", "needle"), [
    (["submit", "--gpus", "9", "--", PY, "-c", "pass"], "asks for 9 GPUs but this cluster has 2"),
    (["submit", "--gpus", "two", "--", PY], "'--gpus'"),
    (["submit", "--gpus", "1"], "no command"),
    (["submit", "--", "no-such-program-xyz"], "not found on the server's PATH"),
    (["submit", "--env", "NOEQUALS", "--", PY], "KEY=VALUE"),
    (["show", "abc"], "not a job id"),
    (["show", "99999"], "job 99999 does not exist"),
    (["logs"], "Missing argument"),
])
def test_bad_input_gives_one_clear_line(shared_server: Server, args: list[str], needle: str,
                                       monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert needle in one_line_error(run_here(args, shared_server.env(), monkeypatch, capsys))


def test_one_line_errors_from_a_real_process(shared_server: Server) -> None:
    assert "'--gpus'" in one_line_error(run(["submit", "--gpus", "two", "--", PY], shared_server.env()))
    bare = {k: v for k, v in shared_server.env().items() if k != "TESSERAE_URL"}
    assert "set TESSERAE_URL" in one_line_error(run(["jobs"], bare))


def test_client_configuration_errors(shared_server: Server, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    env = shared_server.env()
    bare = {k: v for k, v in env.items() if k not in ("TESSERAE_URL", "TESSERAE_TOKEN")}

    def error(args: list[str], env: dict[str, str]) -> str:
        return one_line_error(run_here(args, env, monkeypatch, capsys))

    assert "set TESSERAE_URL" in error(["jobs"], bare)
    assert "set TESSERAE_TOKEN" in error(["jobs"], {**bare, "TESSERAE_URL": shared_server.url})
    assert "invalid or revoked token" in error(["jobs"], {**env, "TESSERAE_TOKEN": "tsr_wrong"})
    dead = "http://127.0.0.1:9"  # the discard port: nothing listens there
    assert "cannot reach the Tesserae server" in error(["jobs"], {**env, "TESSERAE_URL": dead})
    assert "must start with http" in error(["jobs"], {**env, "TESSERAE_URL": "127.0.0.1:8765"})


@pytest.mark.parametrize(("text", "needle"), [
    ('url = "http://127.0.0.1:9"\ntokn = "tsr_x"\n', "line 2: unknown key 'tokn'; the keys are url, token, token_file"),
    ('url = "http://127.0.0.1:9"\n\n[server]\nport = 1\n', "line 3: unknown key 'server'"),
    ("url = 8765\n", "line 1, field 'url': Input should be a valid string"),
    ('url = "http://127.0.0.1:9"\ntoken = "a"\ntoken = "b"\n', "cannot read the client configuration"),
])
def test_the_client_configuration_file_refuses_unknown_keys(tmp_path: Path, text: str, needle: str,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "client.toml"
    config.write_text(text)
    line = one_line_error(run_here(["jobs"], {"TESSERAE_CONFIG": str(config)}, monkeypatch, capsys))
    assert f"error: {config}" in line and needle in line, line


@pytest.mark.parametrize(("args", "needle"), [
    (["--policy", "srtf"], "policy 'srtf'"),
    (["--policy", "no-such-policy"], "unknown policy"),
    (["--executor", "kubernetes"], "unknown executor 'kubernetes'; choose local, ray or slurm"),
    (["--executor", "slurm"], "--executor slurm needs --slurm-partition NAME"),
    (["--virtual-gpus", "2", "--slurm-partition", "gpu"], "--slurm-partition goes with --executor slurm"),
    (["--virtual-gpus", "2", "--master-ports", "29500-29599"], "--master-ports goes with --executor ray or slurm"),
    (["--virtual-gpus", "2", "--tiresias-thresholds", "5,1"], "increasing"),
])
def test_server_refuses_bad_options(tmp_path: Path, args: list[str], needle: str, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    p = run_here(["server", "--state", str(tmp_path / "s"), "--virtual-gpus", "2", "--port", "0", *args], {},
                 monkeypatch, capsys)
    assert needle in one_line_error(p)
    assert not (tmp_path / "s").exists()


def test_server_without_gpus_says_to_use_virtual_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from tesserae.core.errors import InputError
    from tesserae.runtime.executor.gpus import nvml_gpus

    try:
        nvml_gpus()
    except InputError:
        pass
    else:
        pytest.skip("this machine has NVIDIA GPUs")
    p = run_here(["server", "--state", str(tmp_path / "s"), "--port", "0"], {}, monkeypatch, capsys)
    assert "--virtual-gpus" in one_line_error(p)


def test_a_second_server_on_the_same_state_is_refused(shared_server: Server, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    p = run_here(["server", "--state", str(shared_server.state), "--virtual-gpus", "2", "--port", "0",
                  "--insecure-same-user"], {}, monkeypatch, capsys)
    assert "another tesserae server is using" in one_line_error(p)
