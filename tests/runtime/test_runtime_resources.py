"""Resource requests beyond a GPU count (issue 14): a GPU type the scheduler honours, CPUs and memory
told to the job, limited in its cgroup where the server may, and accounted."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from support.cli import one_line_error, run_here
from support.server import PY, Server, wait_for
from tesserae.core.errors import InputError
from tesserae.runtime.executor.gpus import virtual_gpus
from tesserae.runtime.job.resources import limit_cgroup, parse_memory

SLEEP = [PY, "-c", "import time; time.sleep(600)"]


def test_a_gpu_type_is_honoured_and_waits_for_its_own_gpus(tmp_path: Path, servers: Callable[..., Server],
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    s = servers(tmp_path / "state", "--gpu-type", "v100:2,k80:2", gpus=4, policy="fifo", grace=1.0)
    types = {g["id"]: g["type"] for g in s.client().get("/v1/cluster").json()["gpus"]}
    assert sorted(types.values()) == ["k80", "k80", "v100", "v100"]
    p = run_here(["submit", "--gpus", "2", "--gpu-type", "k80", "--", *SLEEP], s.env(), monkeypatch, capsys)
    assert p.returncode == 0, p.stderr
    big = int(p.stdout)
    running = s.wait_state(big, "running")
    assert {types[g] for g in running["assigned_gpus"]} == {"k80"} and running["gpu_type"] == "k80"
    waiting = s.submit(SLEEP, gpu_type="k80")
    j = wait_for(lambda: (v := s.job(waiting))["pending_reason"] and v, 20, 0.1, "a reason")
    assert j["state"] == "queued" and j["pending_reason"] == "waiting for 1 k80 GPU (0 free)"
    anywhere = s.submit(SLEEP)  # no type asked: the free v100s
    assert {types[g] for g in s.wait_state(anywhere, "running")["assigned_gpus"]} == {"v100"}
    assert s.job(waiting)["state"] == "queued"
    s.client().post(f"/v1/jobs/{big}/cancel")
    assert {types[g] for g in s.wait_state(waiting, "running", timeout=30)["assigned_gpus"]} == {"k80"}

    def refused(body: dict) -> tuple[str, str]:
        r = s.client().post("/v1/jobs", json={"command": ["true"], "gpus": 1, **body})
        assert r.status_code == 422, r.text
        return r.json()["errors"][0]["field"], r.json()["detail"]

    assert refused({"gpu_type": "a100"}) == ("gpu_type", "'gpu_type': this cluster has no 'a100' GPUs; it has k80, "
                                                         "v100")
    assert refused({"gpu_type": "k80", "gpus": 3})[0] == "gpus"
    assert refused({"gpu_type": "k 80"})[0] == "gpu_type"
    assert refused({"cpus": 0})[0] == "cpus" and refused({"memory_mb": 0})[0] == "memory_mb"
    assert "'2x' is not a memory size" in one_line_error(run_here(["submit", "--memory", "2x", "--", "true"],
                                                                  s.env(), monkeypatch, capsys))


def test_cpus_and_memory_reach_the_job_and_are_accounted(tmp_path: Path, servers: Callable[..., Server],
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    s = servers(tmp_path / "state", gpus=1, policy="fifo", grace=1.0)
    script = ("import os, time; print('cpus', os.environ['TESSERAE_CPUS'], 'omp', os.environ['OMP_NUM_THREADS'], "
              "'mem', os.environ['TESSERAE_MEMORY_MB']); cg = open('/proc/self/cgroup').read().split('::')[-1]."
              "strip(); run = os.path.dirname('/sys/fs/cgroup' + cg); print('cpu.max', open(run + '/cpu.max')."
              "read().strip() if os.path.exists(run + '/cpu.max') else 'none'); time.sleep(1)")
    p = run_here(["submit", "--cpus", "2.5", "--memory", "1.5G", "--", PY, "-c", script], s.env(), monkeypatch,
                 capsys)
    assert p.returncode == 0, p.stderr
    job_id = int(p.stdout)
    j = s.wait_state(job_id, ("completed", "failed"), timeout=30)
    log = s.client().get(f"/v1/jobs/{job_id}/logs").text
    assert j["state"] == "completed", log
    assert (j["cpus"], j["memory_mb"]) == (2.5, 1536)
    assert "cpus 2.5 omp 2 mem 1536" in log
    # enforced where the cgroup has the controllers, said in the log otherwise
    assert "cpu.max 250000 100000" in log or "cpus and memory requested but not enforced here" in log, log
    usage = json.loads(run_here(["usage", "--json"], s.env(), monkeypatch, capsys).stdout)
    (admin,) = usage["users"]
    assert admin["cpu_hours"] == pytest.approx(2.5 * j["executed_seconds"] / 3600, rel=0.05)
    shown = run_here(["show", str(job_id)], s.env(), monkeypatch, capsys).stdout
    assert "1536 MiB" in shown and "2.5" in shown


def test_memory_sizes_and_limits(tmp_path: Path) -> None:
    assert [parse_memory(t) for t in ("512M", "16G", "1.5GiB", "100", "1T", "2048k")] == [
        512, 16384, 1536, 100, 1048576, 2]
    for bad in ("", "G", "-1G", "1P", "0"):
        with pytest.raises(ValueError):
            parse_memory(bad)
    cg = tmp_path / "run"
    cg.mkdir()
    assert limit_cgroup(cg, 2.0, 100) == ["cpus", "memory"]  # no controller files: nothing created
    assert not (cg / "cpu.max").exists()
    (cg / "cpu.max").write_text("max 100000")
    (cg / "memory.max").write_text("max")
    assert limit_cgroup(cg, 0.5, 100) == []
    assert (cg / "cpu.max").read_text().startswith("50000 100000") and (cg / "memory.max").read_text() == str(100 << 20)


def test_virtual_gpus_of_several_types() -> None:
    assert [g.gpu_type for g in virtual_gpus(3, "a100:1,T4:2")] == ["a100", "t4", "t4"]
    with pytest.raises(InputError, match="add up to 3, not --virtual-gpus 4"):
        virtual_gpus(4, "a100:1,t4:2")
    with pytest.raises(InputError, match="is not TYPE:COUNT"):
        virtual_gpus(2, "a100:x")


def test_readme_and_runtime_docs_say_what_the_limits_do() -> None:
    """Issue 30: docs/runtime.md said there were no CPU or memory limits, the README that --cpus/--memory
    set cpu.max/memory.max. Both now say what the code above does: limits where the controllers are,
    Slurm's own under the Slurm executor, accounted only elsewhere (and the job's log says so)."""
    root = Path(__file__).resolve().parents[2]
    readme = " ".join((root / "README.md").read_text().split())
    runtime = " ".join((root / "docs" / "runtime.md").read_text().split())
    assert "no memory, CPU" not in runtime and "membership only" not in runtime
    for text in (readme, runtime):
        assert "`cpu.max`/`memory.max`" in text and "`--cpus-per-task`/`--mem`" in text
        assert "accounted only" in text
