"""A bounded fuzz pass over the HTTP API's OpenAPI schema with Schemathesis, on 127.0.0.1 only.

    .venv/bin/pip install 'tesserae[fuzz]'     # Schemathesis
    .venv/bin/python benchmarks/fuzz_api.py --max-examples 200 --seed 1

A real ``tesserae server`` (2 virtual GPUs, a throw-away state folder, listening on 127.0.0.1) is
fuzzed with an admin token through every operation of its own ``/openapi.json``: the examples,
coverage (boundary and invalid values of every parameter and field), fuzzing and stateful phases
(submitted jobs are followed through the schema's links to show, cancel and logs). The server
decides only once an hour (``--rounds-only --round-seconds 3600``), so the fuzzer's submissions
stay queued and no generated command ever runs.

Every Schemathesis check runs but ``positive_data_acceptance``: a submission can be valid for the
schema and still be refused with 422 by design (its program does not exist on the server, it asks
for more GPUs than there are). The pass must end with no 5xx response and a live server. Every
request and response is counted from Schemathesis' HAR report; the figures go to the section
``fuzz_api`` of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

PY = sys.executable


def _start(state: Path, log: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    ready = state.parent / "ready"
    cmd = [PY, "-m", "tesserae.cli", "server", "--state", str(state), "--virtual-gpus", "2", "--host", "127.0.0.1",
           "--port", "0", "--rounds-only", "--round-seconds", "3600", "--insecure-same-user", "--ready-file",
           str(ready)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERAE_")}
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the server did not start: {log.read_text()}")
        time.sleep(0.05)
    return proc, json.loads(ready.read_text())["url"], (state / "admin.token").read_text().strip()


def run_fuzz(workdir: Path, max_examples: int, seed: int, max_time: float | None) -> dict[str, Any]:
    st = shutil.which("schemathesis", path=str(Path(PY).parent)) or shutil.which("schemathesis")
    if st is None:
        raise SystemExit("Schemathesis is not installed: pip install 'tesserae[fuzz]'")
    log = workdir / "server.log"
    proc, url, token = _start(workdir / "state", log)
    reports = workdir / "reports"
    config = workdir / "schemathesis.toml"  # a body over --max-body-bytes is refused with 413: a rejection too
    config.write_text('[checks.negative_data_rejection]\nexpected-statuses = ["400", "401", "403", "404", "405", '
                      '"406", "409", "413", "415", "422", "428", "429"]\n')
    cmd = [st, "--config-file", str(config), "run", f"{url}/openapi.json", "-H", f"Authorization: Bearer {token}",
           "--checks", "all",
           "--exclude-checks", "positive_data_acceptance", "--max-examples", str(max_examples), "--seed", str(seed),
           "--workers", "1", "--no-color", "--report", "json,har", "--report-json-path", str(reports / "run.json"),
           "--report-har-path", str(reports / "run.har"), "--request-timeout", "30"]
    if max_time:
        cmd += ["--max-time", str(max_time)]
    t0 = time.monotonic()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=workdir)
        seconds = time.monotonic() - t0
        alive = proc.poll() is None and httpx.get(url + "/healthz", timeout=5).status_code == 200
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    report = json.loads((reports / "run.json").read_text())
    har = json.loads((reports / "run.har").read_text())
    statuses = collections.Counter(int(e["response"]["status"]) for e in har["log"]["entries"])
    return {"report": report, "statuses": statuses, "seconds": seconds, "alive": alive, "stdout": out.stdout,
            "tracebacks": log.read_text(errors="replace").count("Traceback"),
            "command_line": " ".join([*cmd[1:4], "URL/openapi.json", "-H", "'Authorization: Bearer TOKEN'", *cmd[7:]])
            .replace(str(workdir), "WORKDIR")}


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _report import machine, today, update_section

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-examples", type=int, default=200, help="Test cases per operation and phase.")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-time", type=float, default=None, help="Time budget (s) for the whole pass.")
    parser.add_argument("--no-write", action="store_true", help="Do not update BENCHMARKS.md.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tesserae-fuzz-") as tmp:
        r = run_fuzz(Path(tmp), args.max_examples, args.seed, args.max_time)
    rep, statuses = r["report"], r["statuses"]
    by_class = collections.Counter(f"{s // 100}xx" for s in statuses.elements())
    failures = ", ".join(f"{f['code']} {f['title']} ({f['count']}: {', '.join(f['operations'])})"
                         for f in rep["failures"]) or "none"
    fivexx = by_class.get("5xx", 0)
    print(r["stdout"])
    print(f"requests {sum(statuses.values())}, by class {dict(by_class)}, 5xx {fivexx}, server alive {r['alive']}")
    if args.no_write:
        raise SystemExit(0 if fivexx == 0 and r["alive"] else 1)
    codes = " ".join(f"{code}: {n}" for code, n in sorted(statuses.items()))
    body = f"""## API fuzz pass with Schemathesis (`benchmarks/fuzz_api.py`)

Command: `.venv/bin/python benchmarks/fuzz_api.py --max-examples {args.max_examples} --seed {args.seed}`
(Schemathesis {rep['schemathesis_version']}: `{r['command_line']}`). Machine: {machine()}. Date: {today()}.

A real server on 127.0.0.1 (2 virtual GPUs, admin token, decisions once an hour so that no fuzzed job runs),
every operation of its OpenAPI schema, phases examples, coverage, fuzzing and stateful (jobs followed through
the schema's links), every check but `positive_data_acceptance` (a schema-valid submission naming a program
the server does not have is refused with 422 by design).

| operations tested | test cases | requests | 2xx | 4xx | **5xx** | server alive after | tracebacks in its log | wall (s) |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
| {rep['operations']['tested']}/{rep['operations']['total']} | {rep['test_cases']['generated']} | {sum(statuses.values())} | {by_class.get('2xx', 0)} | {by_class.get('4xx', 0)} | **{fivexx}** | {'yes' if r['alive'] else 'NO'} | {r['tracebacks']} | {r['seconds']:.0f} |

Responses by status: {codes}. Other check failures: {failures}.
"""  # noqa: E501
    update_section("fuzz_api", body)
    print("wrote the 'fuzz_api' section of BENCHMARKS.md")
    raise SystemExit(0 if fivexx == 0 and r["alive"] else 1)


if __name__ == "__main__":
    main()
