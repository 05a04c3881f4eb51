"""Slurm's client commands as the server runs them: a fixed environment, a timeout, one-line errors.

The server talks to Slurm only through its commands (``sbatch``, ``scancel``, ``squeue``,
``scontrol``): no library binding to keep in step with the installed Slurm. Each runs with the
server's ``PATH`` and ``SLURM_CONF`` and nothing else of its environment (a job's variables never
reach them: they are privileged, they act as root), ``LC_ALL=C`` (their output is parsed), and a
timeout: a ``slurmctld`` that does not answer (it restarts, say) makes a command fail in
seconds, never hang the controller.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

#: What a Slurm command gets of the server's environment.
PASSED = ("PATH", "SLURM_CONF")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
#: Seconds a command may take (slurmctld answers in milliseconds; a restart takes a few seconds).
TIMEOUT = 10.0
_KEY = re.compile(r"(?:^|\s)([A-Za-z][\w:/.]*)=")


class SlurmError(Exception):
    """A Slurm command failed: ``message`` is its first line of complaint."""


def fields(line: str) -> dict[str, str]:
    """``Key=Value Key=Value ...`` (``scontrol show ... -o``; a value may hold spaces) as a dict."""
    keys = list(_KEY.finditer(line))
    out = {}
    for k, m in enumerate(keys):
        end = keys[k + 1].start() if k + 1 < len(keys) else len(line)
        out[m.group(1)] = line[m.end():end].strip()
    return out


@dataclass(frozen=True)
class JobState:
    """One Slurm job as ``squeue`` lists it."""

    job_id: int
    name: str
    state: str  # RUNNING, PENDING, COMPLETED, NODE_FAIL...
    nodes: str
    reason: str


#: Job states after which nothing of the job runs any more (but see NODE_FAIL in ``runs``).
FINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                   "DEADLINE", "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT"})


class Slurm:
    """Runs Slurm's commands (see the module docstring)."""

    def __init__(self, timeout: float = TIMEOUT) -> None:
        self.timeout = timeout
        self.env = {k: os.environ[k] for k in PASSED if k in os.environ}
        self.env.setdefault("PATH", DEFAULT_PATH)
        self.env["LC_ALL"] = "C"

    def installed(self) -> bool:
        return shutil.which("sbatch", path=self.env["PATH"]) is not None

    def run(self, *argv: str, timeout: float | None = None) -> str:
        """The command's output; SlurmError (one line) when it cannot run, fails or times out."""
        try:
            r = subprocess.run(list(argv), capture_output=True, text=True, env=self.env, stdin=subprocess.DEVNULL,
                               timeout=timeout or self.timeout, check=False)
        except FileNotFoundError:
            raise SlurmError(f"'{argv[0]}' is not installed here (Debian: apt-get install slurm-client)") from None
        except subprocess.TimeoutExpired:
            raise SlurmError(f"'{argv[0]}' did not answer within {timeout or self.timeout:g} s (is slurmctld up?)"
                             ) from None
        if r.returncode != 0:
            lines = [ln.strip() for ln in (r.stderr or r.stdout).splitlines() if ln.strip()]
            raise SlurmError(f"{argv[0]} {argv[1] if len(argv) > 1 else ''}: "
                             f"{lines[0] if lines else f'exit {r.returncode}'}".replace(" : ", ": "))
        return r.stdout

    # ------------------------------------------------------------------ what Slurm knows
    def config(self) -> dict[str, str]:
        """``scontrol show config``: ``Key = Value`` lines."""
        out = {}
        for line in self.run("scontrol", "show", "config").splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() and " " not in key.strip():
                out[key.strip()] = value.strip()
        return out

    def records(self, kind: str) -> list[dict[str, str]]:
        """``scontrol show KIND -o`` (partition, node): one dict per record."""
        return [fields(line) for line in self.run("scontrol", "show", kind, "-o").splitlines() if "=" in line]

    def jobs(self, partition: str) -> dict[int, JobState]:
        """The partition's jobs, ended ones too (for ``MinJobAge`` after their end), by Slurm job id."""
        out = {}
        for line in self.run("squeue", "--noheader", "--states=all", "--partition", partition,
                             "--format=%i|%j|%T|%N|%r").splitlines():
            parts = line.split("|")
            if len(parts) == 5 and parts[0].strip().isdigit():
                out[int(parts[0])] = JobState(int(parts[0]), parts[1].strip(), parts[2].strip(), parts[3].strip(),
                                              parts[4].strip())
        return out

    # ------------------------------------------------------------------ acting
    def submit(self, options: Sequence[str], script: str) -> int:
        """``sbatch --parsable OPTIONS SCRIPT``: the new job's id."""
        out = self.run("sbatch", "--parsable", *options, script).strip()
        head = out.split(";", 1)[0]
        if not head.isdigit():
            raise SlurmError(f"sbatch answered {out[:200]!r}, not a job id")
        return int(head)

    def cancel(self, job_ids: Sequence[int], *, signal: str | None = None, batch: bool = False,
               full: bool = False) -> None:
        """``scancel`` the jobs (``signal`` with ``--batch``: to the batch script only, i.e. the launcher)."""
        if not job_ids:
            return
        opts = [f"--signal={signal}"] if signal else []
        opts += ["--batch"] if batch else []
        opts += ["--full"] if full else []
        self.run("scancel", *opts, *(str(j) for j in job_ids))
