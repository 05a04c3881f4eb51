"""The GPU health probe (issue 30): ``nvidia-smi``'s CSV read as hostile text, each failure mode
(uncorrectable ECC errors, pages pending retirement, a failed row remap, a lost GPU, a GPU missing
from the output, the driver gone), an older driver's fallback, and on a real server an unhealthy GPU
kept off placements like a drained one. A fake ``nvidia-smi`` (a shell script) stands in for the
driver: no GPU needed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from support.server import PY, Server, wait_for
from tesserae.runtime.executor.gpu_health import FIELDS, GpuHealth, parse, query, verdict

HEALTHY = "0, GPU-a, 0, No, No\n1, GPU-b, [N/A], [N/A], [N/A]\n"


def fake_smi(folder: Path, csv: str) -> Path:
    """An ``nvidia-smi`` that prints ``folder/gpus.csv`` (4 fields for a query without remapped rows);
    ``folder/old`` makes it refuse remapped_rows.failure as an older driver does, ``folder/fail`` fail."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "gpus.csv").write_text(csv)
    smi = folder / "nvidia-smi"
    smi.write_text(f"""#!/bin/sh
if [ -f {folder}/fail ]; then
  echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."; exit 9
fi
case "$1" in
  *remapped_rows*)
    if [ -f {folder}/old ]; then echo 'Field "remapped_rows.failure" is not a valid field to query.'; exit 2; fi
    cat {folder}/gpus.csv ;;
  *) cut -d, -f1-4 {folder}/gpus.csv ;;
esac
""")
    smi.chmod(0o755)
    return smi


def test_each_failure_mode_has_its_verdict() -> None:
    assert verdict({"ecc.errors.uncorrected.volatile.total": "0", "retired_pages.pending": "No"}) == ""
    assert verdict({"ecc.errors.uncorrected.volatile.total": "[N/A]"}) == ""  # a GPU without ECC
    assert "3 uncorrectable ECC errors" in verdict({"ecc.errors.uncorrected.volatile.total": "3"})
    assert "retired" in verdict({"retired_pages.pending": "Yes"})
    assert "row remap failed" in verdict({"remapped_rows.failure": "1"})
    assert "lost the GPU" in verdict({"ecc.errors.uncorrected.volatile.total": "[GPU is lost]"})
    lines = "0, GPU-a, 0, No, No\nnot a line\n99999, x, 1, No, No\n1, GPU-b, 7, No, No, extra\n" + "x" * 100_000
    assert parse(lines, FIELDS) == {"0": ""}, "lines it cannot read make no GPU healthy or unhealthy"


def test_the_probe_reads_nvidia_smi_and_falls_back_on_an_older_driver(tmp_path: Path) -> None:
    smi = fake_smi(tmp_path / "smi", "0, GPU-a, 0, No, No\n1, GPU-b, 2, No, No\n")
    assert query([str(smi)]) == ({"0": "", "1": "2 uncorrectable ECC errors since boot"}, "")
    (tmp_path / "smi" / "old").touch()
    assert query([str(smi)]) == ({"0": "", "1": "2 uncorrectable ECC errors since boot"}, "")
    (tmp_path / "smi" / "fail").touch()
    verdicts, why = query([str(smi)])
    assert verdicts is None and "couldn't communicate with the NVIDIA driver" in why


def test_a_missing_gpu_and_a_gone_driver_make_gpus_unhealthy(tmp_path: Path) -> None:
    smi = fake_smi(tmp_path / "smi", "0, GPU-a, 0, No, No\n")
    said: list[str] = []
    health = GpuHealth([str(smi)], ["0", "1"], log=said.append)
    health.probe_once()
    assert health.unhealthy() == {"1": "not seen by nvidia-smi (fallen off the bus?)"}
    (tmp_path / "smi" / "gpus.csv").write_text(HEALTHY)
    health.probe_once()
    assert health.unhealthy() == {} and said[-1] == "GPU 1: healthy again"
    (tmp_path / "smi" / "fail").touch()
    health.probe_once()
    assert health.unhealthy() == {}, "one failed probe changes nothing"
    health.probe_once()
    assert set(health.unhealthy()) == {"0", "1"} and "probe failing" in health.unhealthy()["0"]


def test_an_unhealthy_gpu_takes_no_new_run_and_shows_on_the_node(tmp_path: Path,
                                                                  servers: Callable[..., Server]) -> None:
    smi = fake_smi(tmp_path / "smi", "0, GPU-a, 0, No, No\n1, GPU-b, 4, No, No\n")
    s = servers(tmp_path / "state", "--gpu-health", str(smi), "--gpu-health-interval", "1", gpus=2,
                policy="fifo", grace=1.0)
    node = s.client().get("/v1/nodes").json()["nodes"][0]
    assert node["unhealthy"] == {"1": "4 uncorrectable ECC errors since boot"}
    gpus = {g["id"]: g for g in s.client().get("/v1/cluster").json()["gpus"]}
    assert gpus[1]["available"] is False and gpus[1]["node_state"] == "unhealthy"
    sleeper = [PY, "-c", "import time; time.sleep(600)"]
    one = s.submit(sleeper)
    assert s.wait_state(one, "running")["assigned_gpus"] == [0]
    two = s.submit(sleeper)
    wait_for(lambda: "waiting for 1 GPU (0 free)" in (s.job(two)["pending_reason"] or ""), 10.0,
             what="the second job to wait: GPU 1 is unhealthy")
    (tmp_path / "smi" / "gpus.csv").write_text(HEALTHY)  # reset: healthy again at the next probe
    assert s.wait_state(two, "running")["assigned_gpus"] == [1]
    assert "GPU 1: unhealthy: 4 uncorrectable ECC errors" in s.log() and "GPU 1: healthy again" in s.log()
