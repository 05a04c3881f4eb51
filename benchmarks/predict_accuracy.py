"""Accuracy of predicted start times: predicted vs actual start over a replayed workload on a real server.

    .venv/bin/python benchmarks/predict_accuracy.py [--jobs 40] [--policies fifo,las] [--seed 0]

For each policy a real ``tesserae server`` (4 virtual GPUs, 5 s rounds, event-driven, jobs as this
account) receives the same seeded workload: ``--jobs`` toy trainers (``examples/toy_trainer.py``,
0.05 s an iteration, 40-240 iterations, declared) of 1, 2 or 4 GPUs, Poisson arrivals every 2.5 s
on average (offered load about 1.3, so most jobs wait). A poller reads ``GET /v1/jobs`` every
0.25 s and keeps the first ``predicted_start`` (and ``predicted_finish``) the API shows in each
waiting episode of a job (before its first run, and after each preemption): the prediction a user
sees when the job starts waiting. Once every job has finished, error = predicted - actual (the
start of the job's next run; its finish). A job that started before any prediction was shown has
no episode counted. Writes the ``predict_accuracy`` section of BENCHMARKS.md
and ``docs/benchmarks/predict_accuracy.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from _report import ROOT, machine, today, update_section

TOY = ROOT / "examples" / "toy_trainer.py"
SPI = 0.05
GPUS = 4


def start_server(state: Path, policy: str, restart: float) -> tuple[subprocess.Popen[bytes], str, str]:
    cmd = [sys.executable, "-m", "tesserae.cli", "server", "--state", str(state), "--virtual-gpus", str(GPUS),
           "--port", "0", "--policy", policy, "--round-seconds", "5", "--grace-seconds", "5",
           "--insecure-same-user", "--predict-restart-seconds", str(restart)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERAE_")}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            doc = json.loads((state / "server.json").read_text())
            if httpx.get(doc["url"] + "/healthz", timeout=2).status_code == 200:
                return proc, doc["url"], (state / "admin.token").read_text().strip()
        except (OSError, ValueError, httpx.HTTPError, KeyError):
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("the server did not start")


def workload(n: int, seed: int) -> list[tuple[float, int, int]]:
    """(arrival offset s, GPUs, iterations) per job."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(2.5, n))
    gpus = rng.choice([1, 1, 1, 2, 4], n)
    iters = rng.integers(40, 241, n)
    return [(float(a), int(g), int(i)) for a, g, i in zip(arrivals, gpus, iters, strict=True)]


def replay(policy: str, jobs: list[tuple[float, int, int]], restart: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tesserae-predict-") as tmp:
        state = Path(tmp) / "state"
        proc, url, token = start_server(state, policy, restart)
        client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        seen: dict[tuple[int, int], dict[str, Any]] = {}
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                try:
                    for j in client.get("/v1/jobs").json()["jobs"]:
                        key = (j["id"], j["preemptions"])  # a waiting episode: before run k
                        if j["state"] in ("queued", "preempted") and key not in seen \
                                and j.get("predicted_start") is not None:
                            seen[key] = {"predicted_start": j["predicted_start"],
                                         "predicted_finish": j["predicted_finish"], "seen_at": time.time()}
                except (httpx.HTTPError, ValueError):
                    pass
                time.sleep(0.25)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        t0 = time.time()
        ids = []
        try:
            for offset, g, it in jobs:
                time.sleep(max(0.0, t0 + offset - time.time()))
                r = client.post("/v1/jobs", json={
                    "command": [sys.executable, str(TOY), "--iterations", str(it), "--seconds-per-iteration",
                                str(SPI)], "gpus": g, "iterations": it})
                r.raise_for_status()
                ids.append(int(r.json()["id"]))
            deadline = time.time() + 1800
            while time.time() < deadline:
                states = [j["state"] for j in client.get("/v1/jobs").json()["jobs"]]
                if all(s in ("completed", "failed", "cancelled") for s in states):
                    break
                time.sleep(1.0)
            stop.set()
            poller.join()
            final = {j["id"]: j for j in client.get("/v1/jobs").json()["jobs"]}
            starts = {i: [r["start_time"] for r in client.get(f"/v1/jobs/{i}/runs").json()["runs"]] for i in ids}
        finally:
            client.close()
            proc.terminate()
            proc.wait(30)
    rows = []
    for job_id in ids:
        j, run_starts = final[job_id], starts[job_id]
        for k in sorted(e for i, e in seen if i == job_id) or [0]:
            rows.append({"id": job_id, "episode": k, "state": j["state"], "gpus": j["gpus"],
                         "submit": j["submit_time"], "start": run_starts[k] if k < len(run_starts) else None,
                         "finish": j["finish_time"], "preemptions": j["preemptions"],
                         **seen.get((job_id, k), {})})
    return {"policy": policy, "jobs": rows}


def stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    pred = [r for r in rows if "predicted_start" in r and r["start"] is not None]
    start_err = np.array([r["predicted_start"] - r["start"] for r in pred])
    wait = np.array([r["start"] - r["seen_at"] for r in pred])
    fin = [r for r in pred if r.get("predicted_finish") is not None and r["finish"] is not None]
    finish_err = np.array([r["predicted_finish"] - r["finish"] for r in fin])

    def q(x: np.ndarray, p: float) -> float | None:
        return float(np.percentile(np.abs(x), p)) if x.size else None

    return {"jobs": len({r["id"] for r in rows}), "predicted": len(pred),
            "first_starts": sum(1 for r in pred if r["episode"] == 0),
            "completed": len({r["id"] for r in rows if r["state"] == "completed"}),
            "start_abs_err_median_s": q(start_err, 50), "start_abs_err_p90_s": q(start_err, 90),
            "start_err_mean_s": float(start_err.mean()) if start_err.size else None,
            "wait_after_prediction_median_s": float(np.median(wait)) if wait.size else None,
            "finish_abs_err_median_s": q(finish_err, 50), "finish_abs_err_p90_s": q(finish_err, 90)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=40)
    ap.add_argument("--policies", default="fifo,las")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--restart-seconds", type=float, default=1.0,
                    help="restart cost the predictions charge (the toy trainer starts in about a second here)")
    args = ap.parse_args()
    jobs = workload(args.jobs, args.seed)
    results = []
    for policy in args.policies.split(","):
        res = replay(policy, jobs, args.restart_seconds)
        res["stats"] = stats(res["jobs"])
        results.append(res)
        print(policy, json.dumps(res["stats"]), flush=True)
    command = ".venv/bin/python benchmarks/predict_accuracy.py " + " ".join(sys.argv[1:])
    out = ROOT / "docs" / "benchmarks" / "predict_accuracy.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"date": today(), "command": command.strip(), "results": results}, indent=1) + "\n")

    def s(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    lines = [
        "## Predicted start times against actual starts (`benchmarks/predict_accuracy.py`)",
        "",
        f"Command: `{command.strip()}`. Machine: {machine()}. Updated: {today()}.",
        f"A real `tesserae server` ({GPUS} virtual GPUs, 5 s rounds, event-driven) replays {args.jobs} toy trainers "
        f"(seed {args.seed}: Poisson arrivals every 2.5 s on average, 1/2/4 GPUs, 2-12 s of work each, iterations "
        f"declared); the predictions charge {args.restart_seconds:g} s per (re)start. In each waiting episode of "
        "a job (before its first run, and after each preemption) the first `predicted_start` the API showed is "
        "compared with the start of the job's next run (and `predicted_finish` with its finish). Errors are "
        "absolute, in seconds; the median wait after that first prediction shows the scale. A prediction "
        "assumes that no job arrives after it: under a policy that puts new jobs first (`las`) every later "
        "arrival delays the waiting jobs, so the predicted starts come out early (a negative signed error).",
        "",
        "| policy | jobs | waiting episodes predicted (first starts) | start error median (s) | start error p90 "
        "(s) | mean signed start error (s) | wait after the prediction, median (s) | finish error median (s) | "
        "finish error p90 (s) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for res in results:
        st = res["stats"]
        lines.append(f"| {res['policy']} | {st['jobs']} | {st['predicted']} ({st['first_starts']}) | "
                     f"{s(st['start_abs_err_median_s'])} | "
                     f"{s(st['start_abs_err_p90_s'])} | {s(st['start_err_mean_s'])} | "
                     f"{s(st['wait_after_prediction_median_s'])} | {s(st['finish_abs_err_median_s'])} | "
                     f"{s(st['finish_abs_err_p90_s'])} |")
    update_section("predict_accuracy", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
