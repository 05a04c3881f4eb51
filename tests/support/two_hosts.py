"""Two (or more) Linux "hosts" on this machine, for the Ray executor across real hosts (issue 18).

Each host is a network namespace (``ip netns``) with its own PID, mount and hostname namespaces
(``unshare``): its own loopback, one end of a veth pair (host ``a`` is 10.200.0.1 on ``veth-a``, host
``b`` 10.200.0.2 on ``veth-b``; addresses that exist only inside the namespaces), its own ``/tmp``,
``/dev/shm`` and ``$HOME`` (``/home/admin``: each host gets its own ``~/.ray``; a checkout or a Python that lies
under one of them is mounted back in place, so a clone in /tmp works), a hostname that resolves to
127.0.1.1 as on Debian (the trap of issue 18: gloo picks that address unless told an interface),
and one shared folder bind-mounted at ``/mnt/shared`` on every host (the shared file system). The
checkout (and its ``.venv``) is seen at the same path everywhere, as a shared ``/opt`` would be.

A partition is ``ip link set veth-X down``; a crash is SIGKILL to the host's raylet; a clean stop
is SIGTERM to it (what ``ray stop`` sends; ``ray stop`` itself is never run here, so that nothing can
reach another Ray on this machine). Everything is
made and removed by ``Hosts`` itself: killing a host's init process ends every process of the
host (the kernel does it for a PID namespace), then the namespaces are deleted.

Needs root and iproute2 (``usable()`` says why not). Used by ``tests/ray/test_ray_hosts.py`` and
``benchmarks/ray_detection.py``; the commands each host runs are those of ``docs/ray.md``
(``doc_blocks``), so the documentation is what is tested.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.server import wait_until

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ray.md"
BIN = Path(sys.executable).parent
SHARED_MOUNT = "/mnt/shared"
_CLONE_NEWNET = 0x40000000

# The init process of a host: PID 1 of its PID namespace. It makes the host's private mounts and
# hostname, says "ready", then reaps every orphan until it is killed (which ends the host).
_INIT = r"""
import os, socket, subprocess, sys, time
name, shared, keep = sys.argv[1], sys.argv[2], sys.argv[3:]
def sh(*a): subprocess.run(a, check=True)
sh("mount", "-t", "tmpfs", "tmpfs", "/mnt")
os.makedirs("/mnt/shared")
sh("mount", "--bind", shared, "/mnt/shared")
# The checkout and its Python under a folder about to be hidden (a clone in /tmp): kept aside, put back.
fresh = ("/tmp", "/dev/shm", "/home")
hidden = [p for p in keep if any(p == d or p.startswith(d + "/") for d in fresh)]
for i, p in enumerate(hidden):
    os.makedirs(f"/mnt/keep/{i}")
    sh("mount", "--bind", p, f"/mnt/keep/{i}")
for d in fresh:
    sh("mount", "-t", "tmpfs", "-o", "mode=1777", "tmpfs", d)
for i, p in enumerate(hidden):
    os.makedirs(p, exist_ok=True)
    sh("mount", "--bind", f"/mnt/keep/{i}", p)
os.makedirs("/home/admin", mode=0o700)
with open("/tmp/hosts", "w") as f:
    f.write(f"127.0.0.1 localhost\n127.0.1.1 {name}\n")
sh("mount", "--bind", "/tmp/hosts", "/etc/hosts")
socket.sethostname(name)
print("ready", flush=True)
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.2)
"""


def usable() -> str | None:
    """None when hosts can be made here, else why not (for a skip)."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "making network namespaces needs root (CI runs as root)"
    for tool in ("ip", "unshare", "nsenter", "mount"):
        if shutil.which(tool) is None:
            return f"'{tool}' is not installed (iproute2 / util-linux)"
    probe = f"tsr18-probe-{secrets.token_hex(3)}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"'ip netns add' is not available here: {r.stderr.strip()[:200]}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@dataclass
class Host:
    """One host: its namespace, address, interface, and the init process (a root-namespace pid)."""

    name: str
    netns: str
    ip: str
    iface: str
    init: subprocess.Popen[str] | None = None
    init_pid: int = 0

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """A fresh login's environment on this host: the checkout's Python first on PATH, its own HOME."""
        return {"PATH": f"{BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/home/admin",
                "LANG": os.environ.get("LANG", "C.UTF-8"), "USER": "root", "LOGNAME": "root", **(extra or {})}

    def enter(self) -> list[str]:
        return ["nsenter", "-t", str(self.init_pid), "-p", "-m", "-u", "-n", "--"]


@dataclass
class Hosts:
    """Hosts ``a``, ``b``... on one veth link (a bridge-free pair for two hosts); see the module docstring."""

    shared: Path
    names: tuple[str, ...] = ("a", "b")
    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    hosts: dict[str, Host] = field(default_factory=dict)

    def __enter__(self) -> Hosts:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def start(self) -> None:
        if len(self.names) != 2:
            raise ValueError("two hosts (one veth pair)")
        self.shared.mkdir(parents=True, exist_ok=True)
        for i, n in enumerate(self.names):
            self.hosts[n] = Host(n, f"tsr18-{self.tag}-{n}", f"10.200.0.{i + 1}", f"veth-{n}")
        try:
            a, b = (self.hosts[n] for n in self.names)
            for h in (a, b):
                _ip("netns", "add", h.netns)
            _ip("link", "add", a.iface, "netns", a.netns, "type", "veth", "peer", "name", b.iface, "netns", b.netns)
            for h in (a, b):
                _ip("-n", h.netns, "addr", "add", f"{h.ip}/24", "dev", h.iface)
                _ip("-n", h.netns, "link", "set", "lo", "up")
                _ip("-n", h.netns, "link", "set", h.iface, "up")
                self._start_init(h)
        except BaseException:
            self.close()
            raise

    def _start_init(self, h: Host) -> None:
        h.init = subprocess.Popen(["ip", "netns", "exec", h.netns, "unshare", "--pid", "--fork", "--mount", "--uts",
                                   "--mount-proc", "--propagation", "private", sys.executable, "-c", _INIT,
                                   f"host-{h.name}", str(self.shared), *_kept_paths()],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, start_new_session=True)
        assert h.init.stdout is not None
        line = h.init.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"host {h.name} did not start: {line}{h.init.stderr.read() if h.init.stderr else ''}")
        children = Path(f"/proc/{h.init.pid}/task/{h.init.pid}/children").read_text().split()
        h.init_pid = int(children[0])

    def close(self) -> None:
        """End every process of every host, then delete the namespaces (and with them the veth pair)."""
        for h in self.hosts.values():
            if h.init_pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(h.init_pid, signal.SIGKILL)
            if h.init is not None:
                with contextlib.suppress(ProcessLookupError):
                    h.init.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    h.init.wait(10)
        for h in self.hosts.values():
            _wait_gone(lambda h=h: self.pids(h.name), 10.0)
            subprocess.run(["ip", "netns", "del", h.netns], capture_output=True)

    # ------------------------------------------------------------------ running things on a host
    def run(self, name: str, script: str, *, env: dict[str, str] | None = None, timeout: float = 180.0,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a bash script on host ``name`` (a fresh login's environment plus ``env``)."""
        h = self.hosts[name]
        r = subprocess.run([*h.enter(), "env", "-i", *_assign(h.env(env)), "bash", "-euo", "pipefail", "-c", script],
                           capture_output=True, text=True, timeout=timeout, cwd="/")
        if check and r.returncode != 0:
            raise RuntimeError(f"on host {name}, exit {r.returncode}:\n$ {script}\n{r.stdout[-3000:]}"
                               f"{r.stderr[-3000:]}")
        return r

    def popen(self, name: str, argv: list[str], *, env: dict[str, str] | None = None,
              log: Path | None = None) -> subprocess.Popen[bytes]:
        h = self.hosts[name]
        out = log.open("ab") if log is not None else subprocess.DEVNULL
        try:
            return subprocess.Popen([*h.enter(), "env", "-i", *_assign(h.env(env)), *argv], stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, cwd="/")
        finally:
            if log is not None:
                out.close()  # type: ignore[union-attr]

    def pids(self, name: str, comm: str | None = None) -> list[int]:
        """Processes of host ``name`` (root-namespace pids), optionally only those named ``comm``."""
        h = self.hosts[name]
        if not h.init_pid:
            return []
        try:
            ns = os.readlink(f"/proc/{h.init_pid}/ns/pid")
        except OSError:
            return []
        out = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                if os.readlink(entry / "ns" / "pid") != ns:
                    continue
                if comm is not None and (entry / "comm").read_text().strip() != comm:
                    continue
                out.append(int(entry.name))
        return sorted(out)

    def link(self, name: str, up: bool) -> None:
        """Bring host ``name``'s link down (a partition) or up again."""
        h = self.hosts[name]
        _ip("-n", h.netns, "link", "set", h.iface, "up" if up else "down")

    def kill(self, name: str, comm: str, signum: int = signal.SIGKILL) -> list[int]:
        """Signal host ``name``'s processes named ``comm``: SIGKILL to the raylet is a crash, SIGTERM to it a
        clean stop of the node (what ``ray stop`` sends it; the raylet tells the GCS it is leaving)."""
        pids = self.pids(name, comm)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
        return pids

    # ------------------------------------------------------------------ talking to a host's network
    @contextlib.contextmanager
    def network_of(self, name: str) -> Iterator[Callable[..., Any]]:
        """A ``call(fn, *args)`` that runs ``fn`` on a thread inside host ``name``'s network namespace
        (its sockets are the host's: HTTP to a server listening there)."""
        path = f"/run/netns/{self.hosts[name].netns}"

        def enter() -> None:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(path, os.O_RDONLY)
            try:
                if libc.setns(fd, _CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns")
            finally:
                os.close(fd)

        pool = ThreadPoolExecutor(1, thread_name_prefix=f"netns-{name}", initializer=enter)
        try:
            yield lambda fn, *a, **kw: pool.submit(fn, *a, **kw).result()
        finally:
            pool.shutdown(wait=True)


def _kept_paths() -> list[str]:
    """What every host must see where it is even when it lies under /tmp, /dev/shm or /home (each host's own):
    the checkout, the virtual environment and the Python it was made from."""
    paths = {str(ROOT), sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parent)}
    return sorted(p for p in paths if p != "/")


def _ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")


def _assign(env: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in env.items()]


def _wait_gone(cond: Callable[[], list[int]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while cond() and time.monotonic() < deadline:
        time.sleep(0.05)


# ---------------------------------------------------------------------- docs/ray.md's commands
_BLOCK = re.compile(r"<!-- two-hosts: (?P<name>[\w-]+) on (?P<host>\w) -->\s*```bash\n(?P<body>.*?)```", re.S)


def doc_blocks(doc: Path = DOC) -> dict[str, tuple[str, str]]:
    """The two-host commands of ``docs/ray.md``: block name -> (host, bash script). A block is marked
    ``<!-- two-hosts: NAME on HOST -->`` right before its fenced ``bash`` code."""
    return {m["name"]: (m["host"], m["body"]) for m in _BLOCK.finditer(doc.read_text())}


def run_doc_block(hosts: Hosts, name: str, *, values: dict[str, str] | None = None, timeout: float = 240.0,
                  env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run block ``name`` of docs/ray.md on its host, pasted as it is but for ``<placeholders>`` in
    ``values`` (the token printed on another host, say)."""
    host, body = doc_blocks()[name]
    for key, value in (values or {}).items():
        body = body.replace(f"<{key}>", value)
    if re.search(r"<[a-z][\w -]*>", body):
        raise ValueError(f"block {name} of {DOC} still has a placeholder: {body}")
    return hosts.run(host, body, timeout=timeout, env=env)


def server_client(hosts: Hosts, host: str, state: Path, call: Callable[..., Any]) -> ServerClient:
    """The API of the server whose state folder is ``state`` (as the test sees it), from inside ``host``."""
    doc = json.loads((state / "server.json").read_text())
    token = (state / "admin.token").read_text().strip()
    return ServerClient(doc["url"].replace("0.0.0.0", "127.0.0.1"), token, call)


@dataclass
class ServerClient:
    """HTTP calls to a server inside a host's network (each call made on that network's thread)."""

    url: str
    token: str
    call: Callable[..., Any]

    def request(self, method: str, path: str, **kw: Any) -> Any:
        import httpx

        def go() -> Any:
            r = httpx.request(method, self.url + path, headers={"Authorization": f"Bearer {self.token}"},
                              timeout=20.0, **kw)
            r.raise_for_status()
            return r.json() if r.headers.get("content-type", "").startswith("application/json") else r.text

        return self.call(go)

    def submit(self, command: list[str], gpus: int = 1, **extra: Any) -> int:
        return int(self.request("POST", "/v1/jobs", json={"command": command, "gpus": gpus, **extra})["id"])

    def job(self, job_id: int) -> dict[str, Any]:
        return dict(self.request("GET", f"/v1/jobs/{job_id}"))

    def events(self, job_id: int) -> list[dict[str, Any]]:
        return list(self.job(job_id).get("events", []))

    def cluster(self) -> dict[str, Any]:
        return dict(self.request("GET", "/v1/cluster"))


# ---------------------------------------------------------------------- a cluster on the two hosts
TOY = ROOT / "examples" / "toy_trainer.py"
#: Host B's two virtual GPUs and host A's: the view with both hosts in it.
BOTH_HOSTS = "2x2:v100"


def toy(iterations: int, spi: float, *extra: str) -> list[str]:
    """The toy trainer's command line (the checkout is at the same path on every host)."""
    return [sys.executable, str(TOY), "--iterations", str(iterations), "--seconds-per-iteration", str(spi), *extra]


def start_cluster(hosts: Hosts) -> str:
    """docs/ray.md's Ray head on host A and worker on host B, with token authentication; the token."""
    run_doc_block(hosts, "head")
    token = run_doc_block(hosts, "token").stdout.strip().splitlines()[-1]
    run_doc_block(hosts, "worker", values={"token printed on host A": token})
    return token


def restart_worker(hosts: Hosts, token: str) -> None:
    """Host B's Ray started again (after a crash or a stop): what is left of it killed, then the doc's block."""
    init = hosts["b"].init_pid
    for pid in hosts.pids("b"):
        if pid != init:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    wait_until(lambda: hosts.pids("b") == [init], 30, "host B's processes to end")
    run_doc_block(hosts, "worker", values={"token printed on host A": token})


def start_fast_server(hosts: Hosts, name: str, *, lease: float | None, round_seconds: float = 2.0,
                      grace: float = 2.0) -> Path:
    """A server on host A with short rounds (and ``--ray-lease lease``; None: the default); its state folder."""
    flag = "" if lease is None else f"--ray-lease {lease:g}"
    hosts.run("a", f"tesserae server --state {SHARED_MOUNT}/{name} --executor ray --ray-address 10.200.0.1:6379 "
                   f"--round-seconds {round_seconds:g} --grace-seconds {grace:g} {flag} --insecure-same-user --detach",
              env={"RAY_AUTH_MODE": "token"})
    return hosts.shared / name


def stop_server(hosts: Hosts, state: Path, timeout: float = 90.0) -> None:
    """SIGTERM the server of ``state`` (on host A, where its recorded pid is), and wait until it is gone."""
    pid = json.loads((state / "server.json").read_text())["pid"]
    hosts.run("a", f"kill {int(pid)}")
    wait_until(lambda: not (state / "server.json").exists(), timeout, "the server to stop")


def with_host_b(hosts: Hosts, token: str, api: ServerClient, timeout: float = 180.0) -> None:
    """Host B in the server's view (its Ray started again if the GCS wrote it off during a long partition)."""
    try:
        wait_until(lambda: api.cluster()["cluster"] == BOTH_HOSTS, 10, "host B in the view")
    except AssertionError:
        restart_worker(hosts, token)
        wait_until(lambda: api.cluster()["cluster"] == BOTH_HOSTS, timeout, "host B back")


def host_of(api: ServerClient, job: int) -> str | None:
    """The host (``host-a``/``host-b``) whose GPUs the job holds, or None."""
    for g in api.cluster()["gpus"]:
        if any(j["job"] == job for j in g["jobs"]):
            return str(g["name"]).split(" on ")[1].split(" (")[0]
    return None


def job_on_b(api: ServerClient, command: list[str], timeout: float = 180.0) -> int:
    """A two-GPU job placed on host B (a blocker holds host A's GPUs while it starts, then leaves), once it has
    done 40 iterations."""
    blocker = api.submit(toy(100000, 0.05), gpus=2)
    wait_until(lambda: api.job(blocker)["state"] == "running", timeout, "the blocker to run")
    job = api.submit(command, gpus=2)
    wait_until(lambda: api.job(job)["state"] == "running", timeout, "the job to run")
    where = host_of(api, job)
    if where != "host-b":
        raise AssertionError(f"job {job} runs on {where}, not host-b")
    api.request("POST", f"/v1/jobs/{blocker}/cancel")
    wait_until(lambda: api.job(blocker)["state"] == "cancelled", timeout, "the blocker to leave")
    wait_until(lambda: (api.job(job).get("iterations_done") or 0) >= 40, timeout, "40 iterations")
    return job


def first_event(api: ServerClient, job: int, kind: str, after: float) -> float | None:
    """The time of the job's first ``kind`` event at or after ``after``."""
    return next((float(e["time"]) for e in api.events(job) if e["kind"] == kind and float(e["time"]) >= after), None)


def requeued(api: ServerClient, job: int, since: float, timeout: float) -> tuple[float, float]:
    """Seconds from ``since`` to the job's run closed as lost, and to its restart (waits for the restart)."""
    wait_until(lambda: first_event(api, job, "resumed", since) is not None, timeout, "the job to be restarted", 0.05)
    lost, resumed = first_event(api, job, "lost", since), first_event(api, job, "resumed", since)
    if lost is None or resumed is None:
        raise AssertionError(f"job {job}: no lost/resumed events after {since}: {api.events(job)}")
    return lost - since, resumed - since
