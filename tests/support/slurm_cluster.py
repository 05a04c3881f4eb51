"""A real Slurm cluster on this machine, for the Slurm tests and benchmarks (issue 28).

``SlurmCluster`` starts, in a folder of its own and in seconds, as root: ``munged`` (its own key
and socket), optionally ``mariadbd`` (a fresh data folder) and ``slurmdbd`` (for ``sacct``),
``slurmctld`` and one ``slurmd`` per node, each in the foreground as a child process it stops
again. Every node's GPUs are GRES backed by placeholder device files (``DIR/gpus/NODE/nvidiaK``),
one GRES type per GPU (``a100_0``, ``a100_1``, ...: how Tesserae's Slurm executor pins a run to
the GPU indices its placement chose; see docs/slurm.md). The partition ``tess`` holds every node
and is configured as docs/slurm.md asks (``RootOnly=YES``, ``MaxTime=UNLIMITED``, no preemption,
prompt scheduling).

Two layouts:

- one host: every daemon in this machine's namespaces on free ports, one node (``n1``), so that
  nothing clashes with another Slurm here;
- two hosts: the network namespaces of ``two_hosts.Hosts`` (the two-host Ray harness, reused):
  ``slurmctld`` and node ``a`` on host A (10.200.0.1), node ``b`` on host B (10.200.0.2), their
  files under the shared folder (``/mnt/shared`` on the hosts). A ``slurmd`` killed there leaves
  its jobs running under their ``slurmstepd``, as on a real node.

``usable()`` says why a cluster cannot be made here (not root, packages missing): the tests skip
with that reason. ``.ci/run`` installs the packages on a CI machine.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PARTITION = "tess"
CLUSTER = "tsr"
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "scancel", "sinfo")
ACCOUNTING = ("slurmdbd", "sacct", "sacctmgr", "mariadbd", "mariadb-install-db", "mariadb")
PACKAGES = "slurm-wlm slurmctld slurmd slurmdbd munge mariadb-server slurm-client"


def usable(accounting: bool = False) -> str | None:
    """None when a cluster can be started here, else why not (for a skip)."""
    if sys.platform != "linux":
        return "Slurm's daemons need Linux"
    if os.geteuid() != 0:
        return "starting Slurm's daemons needs root (CI runs as root)"
    missing = [t for t in (*DAEMONS, *(ACCOUNTING if accounting else ())) if shutil.which(t) is None
               and not Path("/usr/sbin", t).exists()]
    if missing:
        return f"Slurm is not installed here (missing {', '.join(missing)}; apt-get install {PACKAGES})"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tool(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


@dataclass
class SlurmCluster:
    """See the module docstring. ``hosts``: a started ``two_hosts.Hosts`` (two hosts), or None (one host)."""

    root: Path
    gpus: int = 4
    gpu_type: str = "a100"
    accounting: bool = False
    hosts: Any = None
    slurmd_timeout: int = 4
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    tag: str = field(default_factory=lambda: secrets.token_hex(3))

    # ------------------------------------------------------------------ layout
    @property
    def nodes(self) -> list[str]:
        return list(self.hosts.names) if self.hosts is not None else ["n1"]

    @property
    def conf_dir(self) -> Path:
        """The folder as the daemons see it (the shared mount on the hosts)."""
        if self.hosts is None:
            return self.root
        from support.two_hosts import SHARED_MOUNT

        return Path(SHARED_MOUNT) / self.root.relative_to(self.hosts.shared)

    @property
    def conf(self) -> str:
        return str(self.conf_dir / "slurm.conf")

    def env(self) -> dict[str, str]:
        """What a Slurm command (or a Tesserae server) needs in its environment to reach this cluster."""
        return {"SLURM_CONF": self.conf}

    def _addr(self, node: str) -> tuple[str, str]:
        if self.hosts is None:
            return "127.0.0.1", socket.gethostname()
        h = self.hosts[node]
        return h.ip, f"host-{node}"

    def gpu_names(self) -> list[str]:
        return [f"{self.gpu_type}_{k}" for k in range(self.gpus)]

    # ------------------------------------------------------------------ files
    def _write(self) -> None:
        d, c = self.root, self.conf_dir
        for sub in ("log", "ctld", "spool"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        key = d / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        os.chmod(key, 0o400)
        if self.hosts is None:
            self.ports = {"ctld": _free_port(), "slurmd": _free_port(), "dbd": _free_port(), "db": _free_port()}
        else:
            self.ports = {"ctld": 6817, "slurmd": 6818, "dbd": 6819, "db": 3306}
        ctld_ip, ctld_host = self._addr(self.nodes[0])
        gres, node_lines = [], []
        for n in self.nodes:
            ip, hostname = self._addr(n)
            dev = d / "gpus" / n
            dev.mkdir(parents=True, exist_ok=True)
            for k, t in enumerate(self.gpu_names()):
                (dev / f"nvidia{k}").touch()
                gres.append(f"NodeName={n} Name=gpu Type={t} File={c / 'gpus' / n / f'nvidia{k}'}")
            node_lines.append(f"NodeName={n} NodeAddr={ip} NodeHostname={hostname} CPUs=16 RealMemory=16000 "
                              f"Gres={','.join(f'gpu:{t}:1' for t in self.gpu_names())} State=UNKNOWN")
        acct = ["AccountingStorageType=accounting_storage/slurmdbd", f"AccountingStorageHost={ctld_ip}",
                f"AccountingStoragePort={self.ports['dbd']}", f"AccountingStoragePass={c / 'munge.sock'}",
                f"AccountingStorageTRES=gres/gpu,{','.join(f'gres/gpu:{t}' for t in self.gpu_names())}"
                ] if self.accounting else ["AccountingStorageType=accounting_storage/none"]
        (d / "slurm.conf").write_text("\n".join([
            f"ClusterName={CLUSTER}", f"SlurmctldHost={ctld_host}({ctld_ip})",
            f"SlurmctldPort={self.ports['ctld']}", f"SlurmdPort={self.ports['slurmd']}",
            "AuthType=auth/munge", f"AuthInfo=socket={c / 'munge.sock'}", "CredType=cred/munge",
            "SlurmUser=root", "SlurmdUser=root", f"StateSaveLocation={c / 'ctld'}",
            f"SlurmdSpoolDir={c / 'spool' / '%n'}", f"SlurmctldPidFile={c / 'slurmctld.pid'}",
            f"SlurmdPidFile={c / 'slurmd-%n.pid'}", f"SlurmctldLogFile={c / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={c / 'log' / 'slurmd-%n.log'}", "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none", "MpiDefault=none", "JobAcctGatherType=jobacct_gather/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "GresTypes=gpu",
            "SchedulerType=sched/backfill", "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0",
            "PreemptType=preempt/none", "SlurmdParameters=config_overrides", "ReturnToService=2",
            f"SlurmdTimeout={self.slurmd_timeout}", "MessageTimeout=5", "KillWait=5", "MinJobAge=300",
            "InactiveLimit=0", *acct, *node_lines,
            f"PartitionName={PARTITION} Nodes={','.join(self.nodes)} Default=YES MaxTime=UNLIMITED State=UP "
            "RootOnly=YES OverSubscribe=NO", ""]))
        (d / "gres.conf").write_text("\n".join([*gres, ""]))
        if self.accounting:
            dbd = d / "slurmdbd.conf"
            dbd.write_text("\n".join([
                "AuthType=auth/munge", f"AuthInfo=socket={c / 'munge.sock'}", f"DbdAddr={ctld_ip}", "DbdHost=localhost",
                f"DbdPort={self.ports['dbd']}", "SlurmUser=root", f"LogFile={c / 'log' / 'slurmdbd.log'}",
                f"PidFile={c / 'slurmdbd.pid'}", "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1",
                f"StoragePort={self.ports['db']}", "StorageUser=slurm", "StoragePass=slurm", "StorageLoc=slurm_acct_db",
                ""]))
            os.chmod(dbd, 0o600)

    # ------------------------------------------------------------------ processes
    def _spawn(self, name: str, argv: list[str], on: str | None = None) -> None:
        log = self.root / "log" / f"{name}.out"
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), **self.env()}
        if self.hosts is not None:
            self.procs[name] = self.hosts.popen(on or self.nodes[0], argv, env=env, log=log)
            return
        with open(log, "ab") as out:
            self.procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                                env={**os.environ, **env}, start_new_session=True)

    def _wait(self, what: str, cond: Callable[[], bool], timeout: float = 60.0, proc: str | None = None) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if proc is not None and self.procs[proc].poll() is not None:
                raise RuntimeError(f"{proc} exited ({self.procs[proc].returncode}) before {what}:\n{self.log(proc)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}:\n{self.log(proc or '')}")
            time.sleep(0.05)

    def log(self, name: str, tail: int = 3000) -> str:
        out = []
        for p in (self.root / "log" / f"{name}.out", self.root / "log" / f"{name}.log"):
            with contextlib.suppress(OSError):
                out.append(p.read_text(errors="replace")[-tail:])
        return "\n".join(out)

    def command(self, *argv: str, check: bool = True, timeout: float = 60.0, on: str | None = None,
                env_tz_utc: bool = False) -> subprocess.CompletedProcess[str]:
        """Run a Slurm command against this cluster (on host ``on`` of two hosts, default the first); with
        ``env_tz_utc`` in UTC (sacct's times)."""
        env = {**self.env(), **({"TZ": "UTC"} if env_tz_utc else {})}
        if self.hosts is not None:
            import shlex

            return self.hosts.run(on or self.nodes[0], " ".join(shlex.quote(a) for a in argv), env=env,
                                  timeout=timeout, check=check)
        r = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env={**os.environ, **env})
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()[-2000:]}")
        return r

    def start(self) -> SlurmCluster:
        try:
            self._write()
            c = self.conf_dir
            self._spawn("munged", [_tool("munged"), "-F", "-f", f"--socket={c / 'munge.sock'}",
                                   f"--key-file={c / 'munge.key'}", f"--log-file={c / 'log' / 'munged.log'}",
                                   f"--pid-file={c / 'munged.pid'}", f"--seed-file={c / 'munged.seed'}"])
            self._wait("munged's socket", lambda: (self.root / "munge.sock").exists(), proc="munged")
            if self.accounting:
                self._start_accounting()
            self._spawn("slurmctld", [_tool("slurmctld"), "-D", "-f", self.conf])
            self._wait("slurmctld", self.ctld_up, proc="slurmctld")
            for n in self.nodes:
                self.start_slurmd(n)
            self.wait_idle()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_accounting(self) -> None:
        d, c = self.root, self.conf_dir
        db = d / "db"
        fast = ["--innodb-buffer-pool-size=16M", "--innodb-log-file-size=4M", "--innodb-flush-method=nosync",
                "--innodb-doublewrite=0", "--innodb-flush-log-at-trx-commit=0", "--skip-name-resolve"]
        r = subprocess.run([_tool("mariadb-install-db"), "--no-defaults", f"--datadir={db}", "--user=root",
                            "--auth-root-authentication-method=normal", "--skip-test-db", *fast],
                           capture_output=True, text=True, timeout=180)
        if r.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed: {r.stderr[-2000:]}")
        sock = c / "mysql.sock"
        self._spawn("mariadbd", [_tool("mariadbd"), "--no-defaults", f"--datadir={c / 'db'}", f"--socket={sock}",
                                 f"--port={self.ports['db']}", "--bind-address=127.0.0.1", "--user=root",
                                 f"--pid-file={c / 'mysql.pid'}", f"--log-error={c / 'log' / 'mariadbd.log'}", *fast])
        self._wait("mariadbd", lambda: (d / "mysql.sock").exists(), proc="mariadbd")
        sql = "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm'; GRANT ALL ON *.* TO 'slurm'@'127.0.0.1';"
        self._wait("the database", lambda: self.command(_tool("mariadb"), f"--socket={sock}", "-uroot", "-e", sql,
                                                           check=False).returncode == 0, proc="mariadbd")
        self._spawn("slurmdbd", [_tool("slurmdbd"), "-D"])
        self._wait("slurmdbd", lambda: self.command("sacctmgr", "-i", "add", "cluster", CLUSTER,
                                                    check=False).returncode == 0, proc="slurmdbd")

    def ctld_up(self) -> bool:
        r = self.command("scontrol", "ping", check=False, timeout=20)
        return "UP" in r.stdout

    def start_slurmd(self, node: str) -> None:
        if self.hosts is not None:  # 'ip netns exec' gave the host a /sys of its own, without cgroup mounts
            self.hosts.run(node, "mountpoint -q /sys/fs/cgroup || { mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup"
                                 " && mkdir /sys/fs/cgroup/systemd /sys/fs/cgroup/freezer && mount -t cgroup -o "
                                 "none,name=systemd cgroup /sys/fs/cgroup/systemd && mount -t cgroup -o freezer cgroup "
                                 "/sys/fs/cgroup/freezer; }")
        self._spawn(f"slurmd-{node}", [_tool("slurmd"), "-D", "-f", self.conf, "-N", node], on=node)

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Every node idle (its slurmd registered, no job)."""
        self._wait("every node idle", lambda: all(self.node_state(n) == "idle" for n in self.nodes), timeout)

    def node_state(self, node: str) -> str:
        """slurmctld's state of the node, lower case (``idle``, ``mixed``, ``idle+drain``...)."""
        out = self.command("scontrol", "show", "node", node, "-o", check=False).stdout
        return next((w.split("=", 1)[1].lower() for w in out.split() if w.startswith("State=")), "")

    def kill(self, name: str, signum: int = signal.SIGKILL) -> None:
        """Signal one daemon (``slurmctld``, ``slurmd-NODE``...) and wait for it to be gone. On two hosts the
        daemon is signalled by name on its host (the child we hold is its ``nsenter``)."""
        p = self.procs.pop(name, None)
        if p is None:
            return
        if self.hosts is not None:
            comm, _, node = name.partition("-")
            self.hosts.kill(node or self.nodes[0], comm[:15], signum)
        with contextlib.suppress(ProcessLookupError):
            p.send_signal(signum)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(30)

    def jobs_saved(self) -> bool:
        """Whether slurmctld's state file holds the start of every job running now.

        slurmctld writes its state at most every ``SAVE_MAX_WAIT`` (5) seconds (``state_save.c``): one
        SIGKILLed earlier is started again without the jobs started since (or with them pending), and it
        kills them on their nodes when those nodes' ``slurmd`` register. A save whose file time is at least
        a second past a job's start (``StartTime``, whole seconds) was written after Slurm started it."""
        out = self.command("squeue", "--noheader", "--states=running", "--format=%S", check=False).stdout.split()
        starts = [time.mktime(time.strptime(s, "%Y-%m-%dT%H:%M:%S")) for s in out if s[:1].isdigit()]
        try:
            saved = (self.root / "ctld" / "job_state").stat().st_mtime
        except OSError:
            return False
        return all(saved >= s + 1 for s in starts)

    def save_jobs(self) -> None:
        """Make slurmctld save its job state now (a change to every running job: its comment; saved within 0.1 s
        here). Not every change is saved by itself: seen with Slurm 22.05, a job the backfill scheduler started
        26 s after its submission, just after a slurmctld restart, was still unsaved 3 minutes later, so
        ``jobs_saved`` never came true (the whole ``test_slurm_executor.py`` run in one process, every time)."""
        out = self.command("squeue", "--noheader", "--states=running", "--format=%i", check=False).stdout.split()
        for job_id in (j for j in out if j.isdigit()):
            self.command("scontrol", "update", f"JobId={job_id}", "Comment=tesserae-test-save", check=False)

    def state_quiet(self, seconds: float = 5.5) -> bool:
        """No state save (of jobs, nodes, partitions...) for ``seconds``, more than ``SAVE_MAX_WAIT``: nothing waits
        to be saved, so the next change is saved at once, and the one after it only 5 s later."""
        try:  # slurmctld renames a save into place through a moment without the file
            saved = [p.stat().st_mtime for p in (self.root / "ctld").glob("*_state")]
        except OSError:
            return False
        return bool(saved) and time.time() - max(saved) >= seconds

    def restart_ctld(self, signum: int = signal.SIGKILL) -> None:
        self.kill("slurmctld", signum)
        self._spawn("slurmctld", [_tool("slurmctld"), "-D", "-f", self.conf])
        self._wait("slurmctld back", self.ctld_up, proc="slurmctld")

    def resume(self, node: str) -> None:
        self.command("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)

    def stop(self) -> None:
        """Stop every daemon this cluster started (slurmd's first: their jobs end with them)."""
        with contextlib.suppress(Exception):
            self.command("scancel", "--partition", PARTITION, check=False, timeout=10)
        order = sorted(self.procs, key=lambda n: (not n.startswith("slurmd-"), n == "munged", n == "mariadbd"))
        for name in order:
            self.kill(name, signal.SIGTERM if name in ("mariadbd", "slurmdbd") else signal.SIGKILL)
        if self.hosts is None:  # the jobs' slurmstepd's outlive a killed slurmd: end those of this cluster
            for pid in _stepds(self.conf):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _stepds(conf: str) -> list[int]:
    """The slurmstepd processes of this cluster's jobs (their environment names its slurm.conf)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if (entry / "comm").read_text().strip() != "slurmstepd":
                continue
            if f"SLURM_CONF={conf}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                out.append(int(entry.name))
    return out
