"""The node agent of the ``ray`` executor: one Ray actor per node, pinned there, that starts and stops
the job processes of that node.

It is a plain class here; ``ray.executor`` turns it into a Ray actor with ``num_cpus=0``, the node's
GPUs (``num_gpus`` = all of them: Ray then hands it their ids, and no other Ray work can take them),
``NodeAffinitySchedulingStrategy(node, soft=False)``, ``max_restarts=0`` and a detached lifetime
under a name derived from the server's state folder and the node id, so that a restarted
controller finds the same agent and adopts the runs it holds (see ``ray.executor``).

A part of a run is started through ``ray.launcher`` (detached from this worker; it watches this
process and kills its job the moment the agent is gone). Its identity is the launcher's pid and
kernel start time; its end is the launcher's ``exit.json`` in the part folder. Every job process
carries ``TESSERAE_RUN_MARKER`` (the run folder, as with the local executor) and
``TESSERAE_RAY_PART`` (the part folder), so leftovers are found and killed by marker.

Every part holds a lease (``ray.lease``) that only the controller's calls renew (``poll``,
``spawn``, ``status`` carry a renewal: the controller's clock at sending and the lease length).
The agent keeps its parts' leases in a node-local file that each part's launcher reads: a part
whose lease ran out is killed by its launcher, and by this agent too should the launcher be stuck.

A part's environment: the node's allowlisted variables, the job's own and the contract's, and
``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME`` naming the interface that carries this node's Ray
address (``node_net``) unless the job or the node sets them. It reaches the part's processes only:
the launcher runs with a fixed environment and reads the part's from ``PART_DIR/env.json``
(``env_handoff``).

The agent exits by itself once it holds no live part and no controller has called it for
``idle_seconds``: a server that is gone for good leaves nothing behind but finished runs' files.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tesserae.runtime.executor import node_net
from tesserae.runtime.executor.gpu_health import GpuHealth
from tesserae.runtime.job import env as job_env
from tesserae.runtime.job import env_handoff
from tesserae.runtime.launch import procs
from tesserae.runtime.ray import launcher as ray_launcher
from tesserae.runtime.ray.lease import LeaseFile, grant, lease_dir

AGENT_VERSION = 4  # 4: health()
PART_VAR = ray_launcher.PART_VAR
LAUNCHER = str(Path(ray_launcher.__file__).resolve())
# Variables a Ray worker has that a job should not inherit from it.
_DROP = ("OMP_NUM_THREADS", "SPT_NOENV", "CUDA_VISIBLE_DEVICES")


def held_gpus(default_type: str) -> list[tuple[str, str, str, float | None, bool]]:
    """The GPUs Ray gave this actor, ``(device, type, name, memory GB, virtual)``: named by NVML where it
    works, else declared ones of ``default_type`` (the node's Ray accelerator type, or --gpu-type)."""
    import ray

    from tesserae.runtime.executor.gpus import gpu_type_of

    names: dict[str, tuple[str, float | None]] = {}
    with contextlib.suppress(Exception):  # no NVML here: the GPUs are declared ones
        from tesserae.runtime.executor.gpus import nvml_gpus

        names = {g.device: (g.name, g.memory_gb) for g in nvml_gpus()}
    gpus = []
    for d in (str(i) for i in ray.get_gpu_ids()):
        if d in names:
            name, mem = names[d]
            gpus.append((d, gpu_type_of(name), name, mem, False))
        else:
            gpus.append((d, default_type, f"virtual {default_type}", None, True))
    return gpus


def _launch_part(spec: dict[str, Any], base_env: dict[str, str], agent_pid: int, agent_ticks: int | None,
                 lease_file: str) -> int | str:
    """Start a part's launcher (``ray.launcher``, which detaches and prints its pid); its pid, or why not."""
    part_dir, log = spec["part_dir"], spec["log"]
    Path(part_dir).mkdir(parents=True, exist_ok=True)
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    Path(spec["cwd"]).mkdir(parents=True, exist_ok=True)
    own = {**base_env, **spec["env"]}
    markers = {procs.MARKER_VAR: spec["marker"], PART_VAR: part_dir}
    # The job's variables go to the job's processes only (a file the launcher reads), never to the launcher.
    env_handoff.write(part_dir, {**node_net.interface_env(spec.get("node_ip", ""), already=own), **own, **markers})
    cmd = [sys.executable, "-I", LAUNCHER, part_dir, log, str(spec["nproc"]), str(spec["first_rank"]),
           str(spec["world"]), str(agent_pid), str(agent_ticks if agent_ticks is not None else "-"), lease_file,
           "--", *spec["argv"]]
    p = subprocess.Popen(cmd, cwd=spec["cwd"], env=env_handoff.launcher_env(markers), stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True)
    line = p.stdout.readline() if p.stdout is not None else b""
    p.wait()
    if p.stdout is not None:
        p.stdout.close()
    if not line.strip().isdigit():
        return f"the part launcher did not start (exit code {p.returncode})"
    return int(line)


class NodeAgent:
    def __init__(self, node_id: str, idle_seconds: float = 600.0) -> None:
        self.node_id = node_id
        self.idle_seconds = idle_seconds
        self.parts: dict[str, dict[str, Any]] = {}
        self.last_call = time.monotonic()
        self.pid = os.getpid()
        self.ticks = procs.start_ticks(self.pid)
        #: The end of each part's lease (``time.monotonic``), and the node-local file its launcher reads.
        self.leases: dict[str, float] = {}
        self.lease_file = LeaseFile(lease_dir(node_id) / f"agent-{self.pid}.json")
        _remove_stale_lease_files(self.lease_file.path.parent)
        self._lock = threading.Lock()
        #: This node's GPU health probe (``executor.gpu_health``), started by the first ``health`` call.
        self._health: GpuHealth | None = None
        threading.Thread(target=self._watch, name="tesserae-agent-watch", daemon=True).start()

    # ------------------------------------------------------------------ housekeeping
    def _touch(self) -> None:
        self.last_call = time.monotonic()

    def _alive(self, part: dict[str, Any]) -> bool:
        return procs.alive(part["pid"], part["ticks"])

    def _renew(self, part_dirs: list[str], renewal: dict[str, float] | None, *, force: bool = False) -> None:
        """Extend the leases of these parts (those this agent holds) by a controller's renewal."""
        if renewal is None:
            return
        until = grant(float(renewal["sent"]), float(renewal["seconds"]))
        if until is None:
            return  # a call held up longer than a lease: it renews nothing
        for d in part_dirs:
            if d in self.parts or force:
                self.leases[d] = max(self.leases.get(d, 0.0), until)
        self._write_leases(force=force)

    def _write_leases(self, *, force: bool = False) -> None:
        try:
            if self.leases:
                self.lease_file.write(self.leases, force=force)
            else:
                self.lease_file.remove()
        except OSError:
            pass  # the launchers then find no lease and stop their parts: the safe side

    def _watch(self) -> None:
        """Every second: kill parts whose lease ran out (their launcher should have); exit once idle."""
        idle_every, last_idle = min(5.0, max(0.5, self.idle_seconds / 4)), time.monotonic()
        while True:
            time.sleep(1.0)
            now = time.monotonic()
            with self._lock:
                overdue = [d for d, p in self.parts.items() if self.leases.get(d, 0.0) + 1.0 < now and self._alive(p)]
            if overdue:
                self.kill(overdue, touch=False)
            if now - last_idle < idle_every:
                continue
            last_idle = now
            with self._lock:
                busy = any(self._alive(p) for p in self.parts.values())
            if not busy and now - self.last_call > self.idle_seconds:
                import ray

                self.lease_file.remove()
                ray.kill(ray.get_runtime_context().current_actor)
                return

    # ------------------------------------------------------------------ queries
    def info(self, default_type: str) -> dict[str, Any]:
        """Who this agent is and the GPUs it holds (``held_gpus``)."""
        import ray

        self._touch()
        ip = ray.util.get_node_ip_address()
        return {"node_id": self.node_id, "ip": ip, "iface": node_net.interface_of(ip), "hostname": socket.gethostname(),
                "pid": self.pid, "ticks": self.ticks, "version": AGENT_VERSION, "gpus": held_gpus(default_type),
                "python": sys.executable}

    def free_port(self, ports: tuple[int, int] | None = None) -> int | None:
        """A TCP port free on this node now, in ``ports`` if given (for MASTER_PORT of a gang whose rank 0
        runs here); None when the range has none free."""
        self._touch()
        return node_net.free_port(ports)

    def poll(self, held: list[str] | None = None, renewal: dict[str, float] | None = None) -> dict[str, dict[str, Any]]:
        """State of every part this agent started: alive, or its end (code, time, orphaned). ``renewal``
        extends the leases of the parts ``held`` (those the controller still counts on)."""
        self._touch()
        out = {}
        with self._lock:
            self._renew(list(held or ()), renewal)
            for key, part in self.parts.items():
                if self._alive(part):
                    out[key] = {"alive": True}
                else:
                    rec = ray_launcher.read_exit(key) or {"code": None, "time": None, "orphaned": False}
                    out[key] = {"alive": False, **rec}
        return out

    def status(self, part_dirs: list[str], renewal: dict[str, float] | None = None) -> dict[str, dict[str, Any]]:
        """Like ``poll`` for the given parts, also those this agent does not know (started by an agent
        that died, or whose record was forgotten): their ``exit.json`` or, failing that, 'unknown'.
        ``renewal`` extends the leases of those it holds (a restarted controller adopting them)."""
        self._touch()
        known = self.poll(part_dirs, renewal)
        out = {}
        for d in part_dirs:
            if d in known:
                out[d] = {"known": True, **known[d]}
            else:
                rec = ray_launcher.read_exit(d)
                out[d] = {"known": False, "alive": False, **(rec or {"code": None, "time": None, "orphaned": False})}
        return out

    # ------------------------------------------------------------------ actions
    def _base_env(self, pass_env: list[str]) -> dict[str, str]:
        """The node's allowlisted variables (``job.env``): never Ray's own, never the node's secrets."""
        return job_env.base_env(os.environ, pass_env=[k for k in pass_env if not k.startswith("RAY_")
                                                       and k not in _DROP])

    def spawn(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Start one part: returns ``{"pid", "ticks"}``, or ``{"error"}`` when it cannot start."""
        self._touch()
        part_dir = spec["part_dir"]
        try:
            with self._lock:
                # The lease first: the launcher reads it from its first look on.
                self._renew([part_dir], spec.get("renewal"), force=True)
                if part_dir not in self.leases:
                    return {"error": "the start request came after its lease would have ended (a delayed call)"}
                launched = _launch_part(spec, self._base_env(list(spec.get("pass_env", ()))), self.pid, self.ticks,
                                        str(self.lease_file.path))
                if isinstance(launched, str):
                    self.leases.pop(part_dir, None)
                    return {"error": launched}
                pid = launched
                self.parts[part_dir] = {"pid": pid, "ticks": procs.start_ticks(pid), "marker": spec["marker"],
                                        "started": time.time()}
                self._write_leases(force=True)
        except OSError as e:
            self.leases.pop(part_dir, None)
            return {"error": e.strerror or str(e)}
        return {"pid": pid, "ticks": self.parts[part_dir]["ticks"]}

    def signal(self, part_dirs: list[str], signum: int) -> None:
        """Send ``signum`` to the launchers of these parts (SIGTERM: the launcher forwards it)."""
        self._touch()
        with self._lock:
            for d in part_dirs:
                part = self.parts.get(d)
                if part is not None and self._alive(part):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(part["pid"], signum)

    def kill(self, part_dirs: list[str], *, touch: bool = True) -> None:
        """SIGKILL these parts: the launcher's process group and every process carrying the part marker."""
        if touch:
            self._touch()
        with self._lock:
            for d in part_dirs:
                part = self.parts.get(d)
                if part is not None and self._alive(part):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(part["pid"], signal.SIGKILL)
                procs.kill_pids(procs.pids_with_marker(d, PART_VAR))

    def pids_with_marker(self, marker: str) -> list[int]:
        self._touch()
        return procs.pids_with_marker(marker)

    def kill_marker(self, marker: str) -> int:
        """SIGKILL every process of a run on this node (found by its run marker)."""
        self._touch()
        pids = procs.pids_with_marker(marker)
        procs.kill_pids(pids)
        return len(pids)

    def forget(self, part_dirs: list[str]) -> None:
        """The controller has recorded how these parts ended: drop them."""
        self._touch()
        with self._lock:
            for d in part_dirs:
                part = self.parts.get(d)
                if part is not None and not self._alive(part):
                    del self.parts[d]
                    self.leases.pop(d, None)
            self._write_leases(force=True)

    def busy(self) -> bool:
        with self._lock:
            return any(self._alive(p) for p in self.parts.values())

    def health(self, command: list[str], devices: list[str], interval: float) -> dict[str, str]:
        """This node's GPUs (of ``devices``) that its health probe finds failing, device -> why; the probe
        (``command``: nvidia-smi, say) starts at the first call and runs every ``interval`` seconds. A
        node without the command is not probed: {"": why}."""
        import shutil

        self._touch()
        if self._health is None:
            if not command or shutil.which(command[0]) is None:
                return {"": f"{command[0] if command else 'no command'} is not on this node's PATH"}
            self._health = GpuHealth(command, devices, interval)
            self._health.start()
        return self._health.unhealthy()


def _remove_stale_lease_files(folder: Path) -> None:
    """Lease files of this node's agents that are gone (``agent-PID.json`` of a dead pid)."""
    with contextlib.suppress(OSError):
        for f in folder.glob("agent-*.json"):
            pid = f.stem.removeprefix("agent-")
            if pid.isdigit() and not procs.alive(int(pid), None):
                with contextlib.suppress(OSError):
                    f.unlink()
