"""The launcher of one part of a run under Slurm: the batch script of the part's Slurm job.

    python -I launcher.py PART_DIR

``slurmstepd`` starts it as root (the partition is root-only) with Slurm's own variables and the
fixed environment the server ran ``sbatch`` with; nothing of the job's. The part's spec is
``PART_DIR/launch.json`` (root's, 0600, on the shared state folder): the command, the job's
environment (the allowlisted base, the job's own variables, the contract's, its devices), its
folder, its log, its account, its ranks. The launcher reads it as data and hands the job's
environment to the job's processes only, which switch to the job's account (supplementary groups,
group, user) before ``exec``: the job's variables never act on a privileged process.

Then, as the other launchers do (``supervise``): ``NPROC`` copies of the command with
``RANK``/``LOCAL_RANK``/``WORLD_SIZE``/``LOCAL_WORLD_SIZE``/``NODE_RANK``/``NNODES``,
``MASTER_ADDR`` (the rank-0 part's node) and ``MASTER_PORT`` (a port free on that node, found by
the rank-0 part's launcher and shared through ``RUN_DIR/master.json``), ``GLOO_SOCKET_IFNAME``/
``NCCL_SOCKET_IFNAME`` (the interface carrying the node's address, unless the job sets them),
``CUDA_VISIBLE_DEVICES`` (Slurm's own for the GPUs it gave, else those the placement chose);
output appended to the job's log (rank 0's part) or ``PART_DIR/output.log``; SIGTERM forwarded
(``scancel --batch --signal=TERM``: the server's preemption); the copies' leftovers killed at the
end; the exit code written to ``PART_DIR/exit.json`` before it exits.

A stop the server asked through the lease file (``lease``: Slurm could not signal the job yet) is
the same SIGTERM, forwarded within 0.25 s of its read; asked before the copies started, it starts
none and exits with the preemption code (the job made no progress to save).

Its lease (``lease``): read every 0.25 s on a thread of its own; when the server revokes the part
or the lease runs out, the launcher kills every process of the part, records ``orphaned`` and
exits (``ray_launcher.fence``). It starts nothing without a lease.

It runs at most once per part (``claim``): Slurm itself may start a part's job a second time (a
``slurmctld`` SIGKILLed before its state save comes back with the job pending, kills it on its node
when the node registers, and starts it again). Such a second launcher starts nothing: it stops what
is left of the part and records ``orphaned`` (the run is lost and requeued, once).

Standard library only (and the runtime's standard-library-only modules).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tesserae.job import PREEMPTED_EXIT_CODE
from tesserae.runtime.executor import node_net
from tesserae.runtime.job import files as job_files
from tesserae.runtime.launch import procs
from tesserae.runtime.launch.supervise import EXIT_FILE, Copies, status_code, write_exit
from tesserae.runtime.local.launcher import _child_setup, parse_account
from tesserae.runtime.ray.launcher import fence
from tesserae.runtime.slurm.lease import Lease

SPEC_FILE = "launch.json"
MASTER_FILE = "master.json"
#: Created by a part's first launcher (``claim``): a launcher that finds it was started a second time by Slurm.
LAUNCHED_FILE = "launched"
_WATCH = 0.25
#: How long a part waits for the rank-0 part to publish its MASTER_PORT.
MASTER_WAIT = 300.0


def write_master(run_dir: str, addr: str, port: int) -> None:
    tmp = os.path.join(run_dir, MASTER_FILE + ".tmp")
    with open(tmp, "w") as f:
        json.dump({"addr": addr, "port": port}, f)
    os.replace(tmp, os.path.join(run_dir, MASTER_FILE))


def read_master(run_dir: str) -> int | None:
    data = job_files.read_capped(os.path.join(run_dir, MASTER_FILE), 4096)
    try:
        port = int(json.loads(data)["port"]) if data else None
    except (ValueError, KeyError, TypeError):
        return None
    return port if port is not None and 0 < port < 65536 else None


def claim(part_dir: str) -> bool:
    """Take the part's one launch (``PART_DIR/launched``, created exclusively); False when a launcher of this part
    already started (Slurm started its job again: see the module docstring)."""
    try:
        fd = os.open(os.path.join(part_dir, LAUNCHED_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                     0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(f"{time.time()} {os.environ.get('SLURM_JOB_ID', '')}\n")
    return True


def _keep_reading(lease: Lease) -> None:
    while True:
        lease.refresh()
        time.sleep(_WATCH)


def _master_port(spec: dict[str, Any], lease: Lease, copies: Copies, part_dir: str) -> int | None:
    """The run's MASTER_PORT: found here by the rank-0 part, read by the others (None: none free)."""
    run_dir = spec["run_dir"]
    if spec["index"] == 0:
        ports = spec.get("master_ports")
        port = node_net.free_port(tuple(ports) if ports else None)
        if port is not None:
            write_master(run_dir, spec["master_addr"], port)
        return port
    deadline = time.monotonic() + MASTER_WAIT
    while time.monotonic() < deadline:
        port = read_master(run_dir)
        if port is not None:
            return port
        why = lease.why_stop(time.monotonic())
        if why is not None:
            fence(copies, part_dir, why, procs.MARKER_VAR, part_dir)
        time.sleep(0.1)
    return None


def _envs(spec: dict[str, Any], port: int, part_dir: str) -> list[dict[str, str]]:
    env = dict(spec["env"])
    env.update({"MASTER_ADDR": spec["master_addr"], "MASTER_PORT": str(port), "NODE_RANK": str(spec["index"]),
                "NNODES": str(spec["parts"]), "TESSERAE_NODE_ID": spec["node"], "TESSERAE_NODE_IP": spec["node_addr"],
                procs.MARKER_VAR: part_dir})
    env.update(node_net.interface_env(spec["node_addr"], already=env))
    if os.environ.get("CUDA_VISIBLE_DEVICES"):  # Slurm's own numbering of the GPUs it gave (cgroup-constrained)
        env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
    nproc = int(spec["nproc"])
    return [{**env, "RANK": str(int(spec["first_rank"]) + i), "LOCAL_RANK": str(i), "WORLD_SIZE": str(spec["world"]),
             "LOCAL_WORLD_SIZE": str(nproc)} for i in range(nproc)]


def _to_log(path: str) -> None:
    fd = job_files.open_log_append(path)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -I launcher.py PART_DIR", file=sys.stderr)
        return 2
    part_dir = argv[0]
    try:
        spec = json.loads(Path(part_dir, SPEC_FILE).read_text())
    except (OSError, ValueError) as e:
        print(f"tesserae: cannot read the part's spec in {part_dir}: {e}", file=sys.stderr, flush=True)
        write_exit(part_dir, 126)
        return 126
    copies = Copies()
    copies.catch_signals()
    lease = Lease(spec["lease_file"], part_dir)
    lease.refresh()
    threading.Thread(target=_keep_reading, args=(lease,), daemon=True, name="lease").start()
    _to_log(spec["log"])
    if not claim(part_dir):
        if os.path.exists(os.path.join(part_dir, EXIT_FILE)):  # the first launcher's record stands
            print("tesserae: Slurm started this part again after it ended; nothing is started", flush=True)
            return 0
        fence(copies, part_dir, "Slurm started this part a second time (a restarted slurmctld forgot it had "
              "started it); nothing is started again, the run is requeued", procs.MARKER_VAR, part_dir)
    why = lease.why_stop(time.monotonic())
    if why is not None:
        fence(copies, part_dir, why, procs.MARKER_VAR, part_dir)
    port = _master_port(spec, lease, copies, part_dir)
    if port is None:
        print("tesserae: no MASTER_PORT for this run (no free port in --master-ports on the rank-0 node, or the "
              "rank-0 part never started); the run is requeued", flush=True)
        write_exit(part_dir, -9, orphaned=True, why="no MASTER_PORT")
        return 1
    if lease.stop_asked:
        print("tesserae: the server stopped this run before it started (preempted while Slurm was starting it)",
              flush=True)
        write_exit(part_dir, PREEMPTED_EXIT_CODE, orphaned=False)
        return status_code(PREEMPTED_EXIT_CODE)
    account = parse_account(spec["account"]) if spec.get("account") else None
    try:
        os.chdir(spec["cwd"])
    except OSError as e:
        print(f"tesserae: cannot enter the job's folder {spec['cwd']}: {e.strerror}", flush=True)
        write_exit(part_dir, 126)
        return 126
    copies.start(spec["argv"], _envs(spec, port, part_dir), _child_setup(None, account),
                 "" if account is None else f" as uid {account[0]}")
    next_watch = [0.0]

    def watch(now: float) -> None:
        if now >= next_watch[0]:
            next_watch[0] = now + _WATCH
            if lease.stop_asked and not copies.pending:  # once, unless scancel's SIGTERM came first
                copies.forward(signal.SIGTERM)
            why = lease.why_stop(now)
            if why is not None:
                fence(copies, part_dir, why, procs.MARKER_VAR, part_dir)

    code = copies.wait(watch)
    left = procs.pids_with_marker(part_dir)
    deadline = time.monotonic() + 10.0
    while left and time.monotonic() < deadline:
        procs.kill_pids(left)
        time.sleep(0.02)
        left = procs.pids_with_marker(part_dir)
    write_exit(part_dir, code, orphaned=False)
    return status_code(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
