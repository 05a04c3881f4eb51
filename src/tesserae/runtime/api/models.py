"""What the API accepts: the bodies (pydantic models, bounded by ``limits``) and the checks of a
submission that need the server (its cluster, its profile, its filesystem).

A submission error names its field: ``SubmitError(field, message)`` becomes a 422 with ``errors``
(see ``app``). ``request_hash`` identifies a submission for its ``Idempotency-Key``.
"""

import hashlib
import json
import os
import re
import shutil
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tesserae.core.queues import PRIORITY_CLASSES, QUEUE_NAME_PATTERN
from tesserae.runtime.api.limits import BoundedInt, SafeStr
from tesserae.runtime.controller.lifecycle import (
    MAX_BACKOFF,
    MAX_DEPENDENCIES,
    MAX_RETRIES,
    MAX_TIME_LIMIT,
    parse_array,
)
from tesserae.runtime.controller.node_fences import find_node, namesakes
from tesserae.runtime.job import env as job_env
from tesserae.runtime.job import output as job_output
from tesserae.runtime.job.resources import MAX_CPUS, MAX_MEMORY_MB

if TYPE_CHECKING:
    from tesserae.runtime.controller.loop import Controller

#: What a node's name may hold (a host name; this machine's nodes are "HOST (TYPE)" with several types).
NODE_NAME_PATTERN = r"^[A-Za-z0-9_.:@()\- ]+$"
MAX_NODE_NAME = 253
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESERVED_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "MASTER_ADDR", "MASTER_PORT", "RANK",
                          "LOCAL_RANK", "WORLD_SIZE"})
_INTERPRETERS = re.compile(r"^(python[0-9.]*|sh|bash|zsh|env|uv|torchrun)$")
#: Linux refuses a single argument or environment string longer than this (MAX_ARG_STRLEN).
MAX_ARG = 131072


class JobSubmission(BaseModel):
    """A job to run: the command (an argv list), how many GPUs (a gang: all or nothing), and extras."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [
        {"command": ["python", "train.py", "--lr", "0.1"], "gpus": 2, "name": "resnet", "iterations": 1000},
        {"command": ["true"], "gpus": 1}]})

    # minItems and the pattern below are published in the schema; the validators give the clearer messages.
    command: list[Annotated[SafeStr, Field(max_length=MAX_ARG)]] = Field(
        max_length=4096, json_schema_extra={"minItems": 1},
        description="Program and arguments (argv), run without a shell unless `shell` is true, in which case it is "
                    "one shell command line.")
    gpus: BoundedInt = Field(description="GPUs the job needs, all at once (a gang).")
    name: SafeStr | None = Field(None, min_length=1, max_length=200, description="Display name.")
    job_type: str = Field("generic", min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.\-]+$",
                          description="Model / batch-size class, as the throughput profile names it; with "
                                      "learned throughputs, a hint for the prior (jobs of one type learn from "
                                      "each other's rates), any name.")
    iterations: BoundedInt | None = Field(None, description="Total iterations (the job's work), if known.")
    env: dict[Annotated[SafeStr, Field(max_length=256)], Annotated[SafeStr, Field(max_length=MAX_ARG)]] = Field(
        default_factory=dict, max_length=1024, description="Extra environment variables. On a server with job "
        "accounts, not those the dynamic loader, the C library, a shell or an interpreter reads at start (LD_*, "
        "PYTHON*, MALLOC_*, GCONV_PATH, BASH_ENV, ...: set those inside the command).")
    workdir: SafeStr | None = Field(None, max_length=4096, json_schema_extra={"pattern": "^/"},
                                    description="Absolute working directory on the server machine (default: a "
                                                "private folder of the job).")
    shell: bool = Field(False, description="Run `command[0]` with /bin/sh -c.")
    nproc: int = Field(1, ge=1, le=64, description="Copies of the command to start (RANK 0..nproc-1).")
    queue: str | None = Field(None, min_length=1, max_length=64, pattern=QUEUE_NAME_PATTERN,
                              description="Tenant queue (a leaf queue you may use); default: your queue.")
    priority_class: Literal[PRIORITY_CLASSES] = Field(  # type: ignore[valid-type]
        "normal", description="production (only inside the queue's guarantee, never preempted), normal, or "
                              "preemptible (the first to lose borrowed GPUs).")
    time_limit: float | None = Field(None, gt=0, le=MAX_TIME_LIMIT, description="Most run time (seconds, summed "
                                     "over its runs); past it the job is stopped and fails.")
    retries: int = Field(0, ge=0, le=MAX_RETRIES, description="Requeue a failed run up to this many times.")
    retry_backoff: float = Field(10.0, ge=0, le=MAX_BACKOFF, description="Seconds before the first retry; "
                                 "doubled at each next one (at most an hour).")
    after: list[BoundedInt] = Field(default_factory=list, max_length=MAX_DEPENDENCIES,
                                    description="Start only after these jobs have ended (in any way).")
    after_ok: list[BoundedInt] = Field(default_factory=list, max_length=MAX_DEPENDENCIES,
                                       description="Start only after these jobs have completed; cancelled if one "
                                                   "fails or is cancelled.")
    array: str | None = Field(None, min_length=1, max_length=200, pattern=r"^[0-9,:\- ]+$",
                              description="A job array: one job per index (0-99, 0-99:2, 1,3,5); each gets "
                                          "TESSERAE_ARRAY_INDEX.")
    hold: bool = Field(False, description="Submit held: it is not scheduled until released.")
    gpu_type: str | None = Field(None, min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.\-]+$",
                                 description="Run only on GPUs of this type (as the cluster names them).")
    node: str | None = Field(None, min_length=1, max_length=MAX_NODE_NAME, pattern=NODE_NAME_PATTERN,
                             description="Run only on this node (its name or id as `GET /v1/nodes` shows it).")
    cpus: float | None = Field(None, gt=0, le=MAX_CPUS, description="CPU cores the job uses (a cgroup CPU quota "
                               "where the server may set one; always accounted).")
    output: SafeStr | None = Field(None, min_length=1, max_length=job_output.MAX_PATH, description="File for the "
                                   "job's output (and errors, without `error`), opened by the job in its working "
                                   "folder; %j = job id, %A = array id, %a = array index.")
    error: SafeStr | None = Field(None, min_length=1, max_length=job_output.MAX_PATH, description="File for the "
                                  "job's errors (standard error), as `output`.")
    memory_mb: int | None = Field(None, ge=1, le=MAX_MEMORY_MB, description="Memory limit in MiB (a cgroup "
                                  "memory limit where the server may set one; always accounted).")

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError('the command is empty: give the program and its arguments, e.g. ["python", '
                             '"train.py"]')
        if not v[0].strip():
            raise ValueError("the program name (first element) is empty")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not _ENV_NAME.match(key):
                raise ValueError(f"'{key}' is not a valid environment variable name")
            if key.startswith("TESSERAE_") or key in RESERVED_ENV:
                raise ValueError(f"{key} is set by Tesserae for every job and cannot be overridden")
        return v

    @field_validator("array")
    @classmethod
    def _array(cls, v: str | None) -> str | None:
        if v is not None:
            parse_array(v)
        return v

    @model_validator(mode="after")
    def _shell(self) -> "JobSubmission":
        if self.shell and len(self.command) != 1:
            raise ValueError("with shell=true, command must be exactly one shell command line")
        return self


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    user: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.@\-]+$")
    admin: bool = False
    label: SafeStr = Field("", max_length=200)


class SubmitError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def default_name(command: list[str]) -> str:
    parts = [os.path.basename(a) for a in command[:3] if a and not a.startswith("-")]
    if len(parts) > 1 and _INTERPRETERS.match(parts[0]):
        return parts[1][:200]
    return (parts[0] if parts else "job")[:200]


def check_submission(sub: JobSubmission, controller: "Controller") -> None:
    """Checks that need the server: GPU count against this cluster, the job type, paths and the program."""
    cluster = controller.cluster
    biggest = max(cluster.gpus_by_type.values())
    if sub.gpus > cluster.num_gpus:
        raise SubmitError("gpus", f"the job asks for {sub.gpus} GPUs but this cluster has {cluster.num_gpus}")
    if sub.gpus > biggest:
        raise SubmitError("gpus", f"the job asks for {sub.gpus} GPUs but at most {biggest} are of one type")
    if sub.gpu_type is not None:
        check_gpu_type(sub.gpu_type, sub.gpus, controller)
    if sub.node is not None:
        check_node(sub.node, sub.gpus, sub.gpu_type, controller)
    known = controller.job_types()
    if sub.job_type not in known and controller.learning is None:  # learned: a type is a hint, any name will do
        shown = ", ".join(known[:12]) + (", ..." if len(known) > 12 else "")
        raise SubmitError("job_type", f"unknown job type '{sub.job_type}'; this server's profile knows: {shown}")
    check_env_allowed(sub.env, controller)
    workdir = None
    if sub.workdir is not None:
        workdir = sub.workdir
        if not os.path.isabs(workdir):
            raise SubmitError("workdir", f"'{sub.workdir}' is not an absolute path")
        if not os.path.isdir(workdir):
            raise SubmitError("workdir", f"'{sub.workdir}' is not a directory on the server")
    for field in ("output", "error"):
        path = getattr(sub, field)
        why = None if path is None else job_output.check_path(path, workdir)
        if why is not None:
            raise SubmitError(field, f"'{path}': {why}")
    if len(set(sub.after) | set(sub.after_ok)) > MAX_DEPENDENCIES:
        raise SubmitError("after", f"a job has at most {MAX_DEPENDENCIES} dependencies")
    if sub.shell:
        return
    check_script(sub.command, workdir)
    prog = sub.command[0]
    if "/" in prog:
        path = prog
        if not os.path.isabs(path):
            if workdir is None:
                raise SubmitError("command", f"'{prog}' is a relative path but the job runs in its own folder; "
                                             "give an absolute path or a workdir")
            path = os.path.join(workdir, path)
        if not os.path.isfile(path):
            raise SubmitError("command", f"'{prog}' does not exist on the server")
        if not os.access(path, os.X_OK):
            raise SubmitError("command", f"'{prog}' is not executable")
    else:
        try:
            found = shutil.which(prog, path=sub.env.get("PATH", os.environ.get("PATH")))
        except (OSError, ValueError):
            found = None
        if found is None:
            raise SubmitError("command", f"'{prog}' is not found on the server's PATH")


_SHELLS = re.compile(r"^(sh|bash|zsh|dash|ksh)$")
_PYTHON = re.compile(r"^python[0-9.]*$")


def script_argument(argv: list[str]) -> str | None:
    """The script an interpreter command runs (``python train.py``, ``bash run.sh``, ``torchrun ...
    train.py``), or None when there is none to check (``python -m``, ``sh -c``, another program)."""
    prog, args = os.path.basename(argv[0]), argv[1:]
    python = bool(_PYTHON.match(prog))
    if python or _SHELLS.match(prog):
        takes_value = ("-W", "-X") if python else ("-o", "+o", "-O", "+O")
        no_script = "cm" if python else "cs"  # -c code, -m module; a shell's -c string, -s (stdin)
        skip = False
        for a in args:
            if skip:
                skip = False
            elif a in takes_value:
                skip = True
            elif a in ("-", "--") or (a[:1] == "-" and a[:2] != "--" and any(f in a[1:] for f in no_script)):
                return None
            elif a[:1] not in ("-", "+"):
                return a
        return None
    if prog == "torchrun":
        if any(a in ("-m", "--module", "--no-python", "--no_python") for a in args):
            return None
        return next((a for a in args if not a.startswith("-") and "=" not in a and a.endswith(".py")), None)
    return None


def check_script(argv: list[str], workdir: str | None) -> None:
    """The script of an interpreter command can exist where the job runs: a relative path needs a
    workdir (the job's own folder starts empty), and the file must be there on the server."""
    script = script_argument(argv)
    if script is None:
        return
    if not os.path.isabs(script):
        if workdir is None:
            raise SubmitError("command", f"'{script}' is a relative path, but the job runs in its own folder on the "
                                         "server, which starts empty; give its absolute path or a workdir "
                                         "(tesserae submit --workdir .)")
        path = os.path.join(workdir, script)
    else:
        path = script
    if not os.path.isfile(path):
        where = f"in {workdir} " if not os.path.isabs(script) else ""
        raise SubmitError("command", f"the script '{script}' does not exist {where}on the server")


def check_env_allowed(env: Mapping[str, str], controller: "Controller") -> None:
    """With job accounts, no variable the loader or an interpreter reads at start (``job.env.refused``)."""
    if controller.isolation.same_user:
        return
    for key in env:
        why = job_env.refused(key)
        if why is not None:
            raise SubmitError(f"env.{key}", why)


def check_gpu_type(gpu_type: str, gpus: int, controller: "Controller") -> None:
    """The cluster has ``gpus`` GPUs of ``gpu_type``, and the placement honours a job's GPU type."""
    by_type = controller.cluster.gpus_by_type
    if gpu_type not in by_type:
        raise SubmitError("gpu_type", f"this cluster has no '{gpu_type}' GPUs; it has {', '.join(sorted(by_type))}")
    if gpus > by_type[gpu_type]:
        raise SubmitError("gpus", f"the job asks for {gpus} {gpu_type} GPUs but this cluster has {by_type[gpu_type]}")
    placement = controller.scheduler.placement
    if not placement.honours_gpu_type:
        raise SubmitError("gpu_type", f"this server's placement '{placement.name}' chooses GPU types by throughput "
                                      "and does not honour a job's GPU type")


def check_node(name: str, gpus: int, gpu_type: str | None, controller: "Controller") -> None:
    """The cluster has a node ``name`` (by name or id) with ``gpus`` GPUs, of ``gpu_type`` if one is asked."""
    view = controller.executor.nodes()
    same = namesakes(view, name)
    if same:
        raise SubmitError("node", f"{len(same)} nodes are called '{name}': give one's id "
                                  f"({', '.join(n.id for n in same[:8])})")
    node = find_node(view, name)
    if node is None:
        names = ", ".join(n.name for n in view[:12]) + (", ..." if len(view) > 12 else "")
        raise SubmitError("node", f"this cluster has no node '{name}'; its nodes are: {names}")
    if gpus > len(node.gpus):
        raise SubmitError("gpus", f"the job asks for {gpus} GPUs but node '{node.name}' has {len(node.gpus)}")
    if gpu_type is not None and node.gpu_type != gpu_type:
        raise SubmitError("node", f"node '{node.name}' has {node.gpu_type} GPUs, not {gpu_type}")


#: Fields added after the first idempotency keys were stored (tenant queues, lifecycle controls, resources).
_LATER_FIELDS = ("queue", "priority_class", "time_limit", "retries", "retry_backoff", "after", "after_ok", "array",
                 "hold", "gpu_type", "cpus", "memory_mb", "output", "error", "node")


def request_hash(sub: JobSubmission) -> str:
    """What identifies a submission for its idempotency key: its canonical JSON."""
    doc = sub.model_dump()
    for key in _LATER_FIELDS:  # left at its default, as before the field existed: old keys still match
        if doc[key] == JobSubmission.model_fields[key].get_default(call_default_factory=True):
            del doc[key]
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
