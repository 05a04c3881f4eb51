"""The job-side library, the launcher, the store and GPU discovery, without a server."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from support.server import PY, REPO, toy, toy_value, wait_for
from tesserae.core.errors import InputError
from tesserae.job import PREEMPTED_EXIT_CODE, RUN_EPOCH, Job, StaleRunError
from tesserae.runtime.executor.gpus import gpu_type_of, machine_cluster, nvml_gpus, virtual_gpus
from tesserae.runtime.job import env_handoff
from tesserae.runtime.local import launcher
from tesserae.runtime.store.database import Store, hash_token


def test_checkpoints_round_trip_and_keep_only_the_latest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tesserae.job

    monkeypatch.setattr(tesserae.job, "_torch", lambda: None)  # the plain-file path (torch: the example test)
    job = Job(checkpoint_dir=tmp_path / "ck", handle_signals=False)
    assert job.restore() is None
    job.save({"iteration": 3, "w": [1.0, 2.0]}, iteration=3)
    job.save({"iteration": 7, "w": [3.0]}, iteration=7)
    again = Job(checkpoint_dir=tmp_path / "ck", handle_signals=False)
    assert again.restore() == {"iteration": 7, "w": [3.0]}
    assert again.iteration == 7
    files = sorted(p.name for p in (tmp_path / "ck").iterdir())
    assert files[0] == "checkpoint-" + files[0].removeprefix("checkpoint-") and len(files) == 2, files
    # Not JSON-able and no PyTorch: pickled, restored the same.
    job.save({"iteration": 9, "seen": {1, 2}}, iteration=9)
    assert Job(checkpoint_dir=tmp_path / "ck", handle_signals=False).restore() == {"iteration": 9, "seen": {1, 2}}
    assert [p.suffix for p in (tmp_path / "ck").glob("checkpoint-*")] == [".pkl"]


def test_progress_reports_are_rate_limited_and_forced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    progress = tmp_path / "progress.json"
    monkeypatch.setenv("TESSERAE_PROGRESS_FILE", str(progress))
    monkeypatch.setenv("TESSERAE_JOB_ID", "12")
    job = Job(total_iterations=100, report_interval=3600, checkpoint_dir=tmp_path, handle_signals=False)
    assert job.under_tesserae and job.job_id == "12"
    job.report(1)
    assert json.loads(progress.read_text())["iterations"] == 1
    job.report(2)  # within the interval: not written
    assert json.loads(progress.read_text())["iterations"] == 1
    job.complete()
    doc = json.loads(progress.read_text())
    assert doc["iterations"] == 2 and doc["total"] == 100


def test_rank_zero_alone_writes_and_the_run_lock_is_per_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ck, progress = tmp_path / "ck", tmp_path / "progress.json"
    monkeypatch.setenv("TESSERAE_PROGRESS_FILE", str(progress))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    rank0 = Job(total_iterations=10, checkpoint_dir=ck, handle_signals=False)
    monkeypatch.setenv("RANK", "1")
    rank1 = Job(total_iterations=10, checkpoint_dir=ck, handle_signals=False)
    assert (rank0.rank, rank0.world_size, rank0.is_primary) == (0, 2, True)
    assert (rank1.rank, rank1.world_size, rank1.is_primary) == (1, 2, False)
    # Rank 1 counts but writes nothing: no progress file, no checkpoint.
    rank1.report(3, force=True)
    assert rank1.save({"iteration": 3}, iteration=3) is None and rank1.iteration == 3
    assert not progress.exists() and not ck.exists()
    rank0.report(4, force=True)
    assert rank0.save({"iteration": 4}, iteration=4) is not None
    assert json.loads(progress.read_text())["iterations"] == 4
    rank1.save({"iteration": 99}, iteration=99)  # must not replace rank 0's checkpoint
    assert rank1.restore() == {"iteration": 4} and rank1.iteration == 4  # every rank reads it
    # The lock: rank 0 holds it for its run; the other ranks of the run pass; another run's rank 0 does not.
    assert rank0.lock_run() and rank0.lock_run()
    assert rank1.lock_run()
    other_run = subprocess.run([PY, "-c", "import sys; from tesserae.job import Job; "
                                f"sys.exit(0 if Job(checkpoint_dir={str(ck)!r}).lock_run() else 9)"],
                               env={**os.environ, "RANK": "0"}, timeout=60)
    assert other_run.returncode == 9
    monkeypatch.setenv("RANK", "two")
    with pytest.raises(ValueError, match="RANK='two' is not an integer"):
        Job(checkpoint_dir=ck, handle_signals=False)


def test_sigterm_checkpoints_and_exits_with_the_preemption_code(tmp_path: Path) -> None:
    env = {**os.environ, "TESSERAE_CHECKPOINT_DIR": str(tmp_path / "ck"),
           "TESSERAE_PROGRESS_FILE": str(tmp_path / "progress.json"), "TESSERAE_JOB_ID": "1"}
    p = subprocess.Popen(toy(200, 0.02), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def progressed() -> bool:
        try:
            return json.loads((tmp_path / "progress.json").read_text())["iterations"] >= 5
        except (OSError, ValueError):
            return False

    wait_for(progressed, 20, 0.02, "progress")
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=20)
    assert p.returncode == PREEMPTED_EXIT_CODE, out
    saved = json.loads((tmp_path / "ck" / "latest.json").read_text())["iteration"]
    assert saved >= 5 and b"checkpoint saved" in out
    done = subprocess.run(toy(200, 0.0), env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"start iteration={saved} " in done.stdout
    result = json.loads((tmp_path / "ck" / "result.json").read_text())
    assert [(r["start"], r["end"]) for r in result["runs"]] == [(0, saved), (saved, 200)]
    assert result["value"] == toy_value(200)


# A SIGTERM that arrives while a completed job's interpreter shuts down: a module-level object whose
# finalizer signals its own process runs after Python has put back the default handlers.
_LATE_SIGTERM = """
import os, signal, sys, time
from tesserae.job import Job
job = Job(total_iterations=1)
job.report(1)
job.complete()
class Late:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
late = Late()
"""


def test_a_completed_job_ends_with_its_own_code_whatever_signal_comes_late(tmp_path: Path) -> None:
    # Before: it died of the signal (-15) though its work was done; the controller counted it as
    # preempted and ran it again (the double completion of the recovery test).
    env = {**os.environ, "TESSERAE_PROGRESS_FILE": str(tmp_path / "progress.json")}
    p = subprocess.run([PY, "-c", _LATE_SIGTERM], env=env, capture_output=True, timeout=30)
    assert p.returncode == 0, (p.returncode, p.stderr)


def test_launcher_records_exit_codes(tmp_path: Path) -> None:
    def launch(*cmd: str, nproc: int = 1) -> tuple[int, int | None, str]:
        run = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        run.mkdir()
        env_handoff.write(run, {"PATH": os.environ.get("PATH", env_handoff.FIXED_PATH)})  # the job's environment
        p = subprocess.run([PY, "-I", launcher.__file__, str(run), str(nproc), "--", *cmd], capture_output=True,
                           text=True, timeout=30)
        rec = launcher.read_exit(str(run))
        return p.returncode, None if rec is None else rec[0], p.stdout + p.stderr

    assert launch(PY, "-c", "pass")[:2] == (0, 0)
    assert launch(PY, "-c", "raise SystemExit(5)")[:2] == (5, 5)
    rc, code, out = launch("/no/such/program")
    assert (rc, code) == (127, 127) and "cannot start '/no/such/program'" in out
    assert launch(PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")[:2] == (128 + 9, -9)
    rc, code, out = launch(PY, "-c", "import os; print('r' + os.environ['RANK'])", nproc=3)
    assert (rc, code) == (0, 0) and sorted(re.findall(r"r\d", out)) == ["r0", "r1", "r2"]
    # One copy fails: the others are stopped and the failure is the job's exit code.
    rc, code, _ = launch(PY, "-c", "import os, sys, time; sys.exit(7) if os.environ['RANK'] == '1' else "
                                   "time.sleep(60)", nproc=2)
    assert code == 7


def test_store_keeps_only_token_hashes_and_uses_wal(tmp_path: Path) -> None:
    store = Store(tmp_path / "t.db")
    token = store.create_token("alice", label="test")
    admin = store.create_token("root", admin=True)
    assert store.authenticate(token).user == "alice" and not store.authenticate(token).admin
    assert store.authenticate(admin).admin
    assert store.authenticate(token + "x") is None
    assert store.has_admin()
    store.close()
    raw = sqlite3.connect(tmp_path / "t.db")
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    hashes = [r[0] for r in raw.execute("SELECT hash FROM tokens")]
    assert hash_token(token) in hashes and token not in hashes
    raw.close()
    for f in tmp_path.iterdir():
        assert token.encode() not in f.read_bytes()
    with pytest.raises(InputError, match="no Tesserae store"):
        Store(tmp_path / "missing.db", create=False)


def test_gpu_discovery() -> None:
    assert gpu_type_of("NVIDIA H100 80GB HBM3") == "h100"
    assert gpu_type_of("NVIDIA A100-SXM4-40GB") == "a100"
    assert gpu_type_of("NVIDIA A10") == "a10"
    assert gpu_type_of("Tesla V100-SXM2-32GB") == "v100"
    assert gpu_type_of("NVIDIA GeForce RTX 4090") == "geforce-rtx-4090"
    cluster, gpus = machine_cluster(virtual_gpus(3, "a100"))
    assert cluster.num_gpus == 3 and cluster.gpu_types == ("a100",) and [g.device for g in gpus] == ["0", "1", "2"]
    try:
        found = nvml_gpus()
    except InputError as e:  # the usual case here: no NVIDIA driver or no nvidia-ml-py
        assert "--virtual-gpus" in str(e)
    else:
        assert found


def test_pytorch_example_is_importable_without_torch() -> None:
    path = REPO / "examples" / "pytorch_trainer.py"
    spec = importlib.util.spec_from_file_location("pytorch_trainer_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports no torch at module level
    assert callable(module.main)
    if importlib.util.find_spec("torch") is None:
        p = subprocess.run([sys.executable, str(path), "--iterations", "1"], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 2 and "needs PyTorch" in p.stderr and "Traceback" not in p.stderr


def test_pytorch_example_preempts_and_resumes_on_cpu(tmp_path: Path) -> None:
    """The GPU example, shrunk and on the CPU (this machine has no GPU): SIGTERM, state dicts, resume."""
    pytest.importorskip("torch")
    env = {**os.environ, "TESSERAE_CHECKPOINT_DIR": str(tmp_path / "ck"),
           "TESSERAE_PROGRESS_FILE": str(tmp_path / "progress.json"), "TESSERAE_JOB_ID": "1",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [PY, str(REPO / "examples" / "pytorch_trainer.py"), "--iterations", "100000", "--device", "cpu",
           "--d-model", "32", "--layers", "1", "--heads", "2", "--seq-len", "16", "--vocab", "64",
           "--batch-size", "2", "--checkpoint-every", "0", "--log-every", "1000"]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def progressed() -> bool:
        try:
            return json.loads((tmp_path / "progress.json").read_text())["iterations"] >= 2
        except (OSError, ValueError):
            return p.poll() is not None

    wait_for(progressed, 60, 0.05, "the PyTorch example to train")
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == PREEMPTED_EXIT_CODE, out
    manifest = json.loads((tmp_path / "ck" / "latest.json").read_text())
    assert manifest["format"] == "torch" and manifest["iteration"] >= 2
    resumed = subprocess.run([*cmd[:3], str(manifest["iteration"] + 1), *cmd[4:]], env=env, capture_output=True,
                             text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"start iteration {manifest['iteration']} of {manifest['iteration'] + 1}" in resumed.stdout


def test_the_controller_table_keeps_its_identity_as_jobs_arrive(tmp_path: Path) -> None:
    """Per-table policy state (Tiresias' queues) must survive from round to round, as in the simulator."""
    from tesserae.config import RunSpec, build_scheduler
    from tesserae.core.jobs import JobSpec
    from tesserae.profiles.loader import load_profile
    from tesserae.runtime.controller.loop import Controller
    from tesserae.runtime.local.executor import LocalExecutor

    cluster, gpus = machine_cluster(virtual_gpus(2))
    store = Store(tmp_path / "t.db")
    scheduler = build_scheduler(cluster, load_profile(None), RunSpec(policy="tiresias-las"))
    c = Controller(store, LocalExecutor(gpus), scheduler, cluster, tmp_path, log=lambda msg: None)
    specs = [JobSpec(1, 0.0, 1, "resnet50", 10.0), JobSpec(2, 1.0, 1, "generic", 10.0)]
    first = c.rounds.table_for(specs)
    types = list(first.types)
    grown = c.rounds.table_for([*specs, JobSpec(3, 2.0, 2, "vgg16", 10.0)])
    assert grown is first and grown.n == 3 and grown.types == types
    assert [grown.job_type(r) for r in range(3)] == ["resnet50", "generic", "vgg16"]
    # A stored job of a type the profile does not know (the API refuses those now; an older server did
    # not) counts as 'generic': it cannot make the policy's per-job state restart for everyone.
    for job_type in ("resnet50", "my-model"):
        store.execute("INSERT INTO jobs (user, name, job_type, num_gpus, command, state, submit_time) "
                      "VALUES ('u', 'j', ?, 1, '[\"true\"]', 'queued', 0)", (job_type,))
    table, _, _ = c.rounds.build_table(1.0)
    assert table is first and table.types == types
    assert [table.job_type(r) for r in range(2)] == ["resnet50", "generic"]
    store.close()


def test_a_stale_run_cannot_write_over_a_newer_runs_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run epochs: once run 8 started, run 7 (a copy cut off from the server) may write neither a checkpoint
    nor progress, and cannot start again; outside Tesserae (no TESSERAE_RUN_ID) nothing is fenced."""
    monkeypatch.setenv("TESSERAE_PROGRESS_FILE", str(tmp_path / "progress.json"))
    monkeypatch.setenv("TESSERAE_RUN_ID", "7")
    old = Job(checkpoint_dir=tmp_path / "ck", handle_signals=False)
    old.save({"iteration": 20}, iteration=20)
    monkeypatch.setenv("TESSERAE_RUN_ID", "8")
    new = Job(checkpoint_dir=tmp_path / "ck", handle_signals=False)
    assert (tmp_path / "ck" / RUN_EPOCH).read_text().strip() == "8"
    assert new.restore() == {"iteration": 20}
    with pytest.raises(StaleRunError, match="TESSERAE_RUN_ID=7"):
        old.save({"iteration": 40}, iteration=40)
    with pytest.raises(StaleRunError):
        old.report(41, force=True)
    new.save({"iteration": 25}, iteration=25)
    assert Job(checkpoint_dir=tmp_path / "ck", handle_signals=False).restore() == {"iteration": 25}
    assert json.loads((tmp_path / "progress.json").read_text())["iterations"] == 25
    monkeypatch.setenv("TESSERAE_RUN_ID", "7")
    with pytest.raises(StaleRunError):
        Job(checkpoint_dir=tmp_path / "ck", handle_signals=False)
    monkeypatch.delenv("TESSERAE_RUN_ID")
    Job(checkpoint_dir=tmp_path / "ck", handle_signals=False).save({"iteration": 1}, iteration=1)
