"""The ``slurm.conf`` settings Tesserae needs, checked when the server starts (docs/slurm.md).

Tesserae decides which run starts where and when; Slurm must start exactly those, on exactly those
GPUs, and nothing else on them, and must never stop one on its own. A setting that would break
that stops the server with one line naming it:

- ``SelectType=select/cons_tres`` and ``gpu`` in ``GresTypes``: GPUs are a per-job resource;
- the partition exists, is ``State=UP``, and has ``RootOnly=YES``: only root submits there, so
  Slurm starts no job that Tesserae did not decide (the server runs as root; runs switch to the
  job's account themselves);
- its ``MaxTime=UNLIMITED``: Slurm would end a run at its time limit;
- where memory is a consumable resource (``CR_*_Memory``), a default memory per CPU, GPU or node:
  otherwise a run whose job asks no memory takes its node's whole memory;
- no preemption of its jobs: ``PreemptType=preempt/none``, or ``PreemptMode=OFF`` on the partition;
- its nodes belong to no other partition that is up: Slurm would start that partition's jobs on
  Tesserae's GPUs;
- every GPU of its nodes is a GRES type of its own, ``MODEL_INDEX`` (``nodes``): a run is pinned to
  the GPUs the placement chose.

Settings that only slow starts down are warnings: ``defer`` in ``SchedulerParameters``, a
``batch_sched_delay`` or ``sched_min_interval`` above 0 (a decided run waits for Slurm's next
scheduling pass), and a ``SlurmdTimeout`` over a minute (a dead node is noticed that much later).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping

from tesserae.core.errors import InputError
from tesserae.runtime.slurm.nodes import SlurmNode

DOC = "docs/slurm.md"


def _failure(conf: str) -> Callable[[str, str], InputError]:
    """Errors naming slurm.conf (``conf``), the setting (its name is the field) and what to change: one line."""

    def fail(setting: str, why: str) -> InputError:
        return InputError(f"{setting}: {why} (see {DOC})", path=conf, field=re.split(r"[= ]", setting, maxsplit=1)[0])

    return fail


def _duration_seconds(text: str) -> float | None:
    m = re.fullmatch(r"\s*(\d+)\s*(sec)?\s*", text or "")
    return float(m.group(1)) if m else None


def check(config: Mapping[str, str], partitions: list[dict[str, str]], nodes: list[SlurmNode], partition: str,
          *, as_root: bool | None = None) -> list[str]:
    """Raise InputError (naming the setting) when Slurm cannot run Tesserae's decisions faithfully;
    return the warnings (settings that only delay starts)."""
    root = os.geteuid() == 0 if as_root is None else as_root
    _fail = _failure(config.get("SLURM_CONF", "slurm.conf"))
    select = config.get("SelectType", "")
    if select != "select/cons_tres":
        raise _fail(f"SelectType={select}", "Tesserae gives each run GPUs of its own: set SelectType=select/cons_tres")
    if "gpu" not in [t.strip() for t in config.get("GresTypes", "").split(",")]:
        raise _fail(f"GresTypes={config.get('GresTypes', '')}", "GPUs are GRES: add gpu to GresTypes")
    part = next((p for p in partitions if p.get("PartitionName") == partition), None)
    if part is None:
        known = ", ".join(p.get("PartitionName", "?") for p in partitions) or "none"
        raise _fail(f"PartitionName={partition}", f"there is no such partition (Slurm has: {known})")
    where = f"partition {partition}"
    if part.get("State", "UP") != "UP":
        raise _fail(f"State={part.get('State')} on {where}", "the partition must be UP for runs to start")
    if part.get("RootOnly", "NO") != "YES":
        raise _fail(f"RootOnly={part.get('RootOnly', 'NO')} on {where}", "anyone could submit jobs there that Slurm "
                    "would start on Tesserae's GPUs: set RootOnly=YES (only root, i.e. the Tesserae server, submits)")
    if not root:
        raise _fail(f"RootOnly=YES on {where}", "only root may submit there: run the Tesserae server as root "
                    "(jobs still run as their own accounts: --job-user or --user-map)")
    if part.get("MaxTime", "UNLIMITED") != "UNLIMITED":
        raise _fail(f"MaxTime={part.get('MaxTime')} on {where}", "Slurm would end a run at that limit: set "
                    "MaxTime=UNLIMITED (Tesserae applies each job's own time limit)")
    if "MEMORY" in config.get("SelectTypeParameters", "").upper() and not any(
            v not in ("", "UNLIMITED", "0", "(null)") for k in ("DefMemPerCPU", "DefMemPerGPU", "DefMemPerNode")
            for v in (config.get(k, ""), part.get(k, ""))):
        raise _fail(f"SelectTypeParameters={config.get('SelectTypeParameters')}", "memory is a consumable resource "
                    "but has no default: a run whose job asks no memory would take its node's whole memory and the "
                    "node's next run would wait; set DefMemPerGPU (or DefMemPerCPU) on the partition")
    preempt = config.get("PreemptType", "preempt/none")
    if preempt != "preempt/none" and part.get("PreemptMode", "OFF").upper() != "OFF":
        raise _fail(f"PreemptType={preempt} with PreemptMode={part.get('PreemptMode')} on {where}",
                    "Slurm could preempt Tesserae's runs on its own: set PreemptMode=OFF on the partition")
    mine = [n for n in nodes if partition in n.partitions]
    if not mine:
        raise _fail(f"Nodes= of {where}", "the partition has no node")
    up = {p.get("PartitionName", ""): p for p in partitions if p.get("State", "UP") == "UP"}
    for n in mine:
        others = [p for p in n.partitions if p != partition and p in up]
        if others:
            raise _fail(f"PartitionName={others[0]} Nodes=...{n.name}...", f"node {n.name} is also in partition "
                        f"{others[0]}, whose jobs Slurm would start on Tesserae's GPUs: give {partition} nodes of its "
                        f"own (or set State=INACTIVE on {others[0]})")
        if n.problem is not None:
            raise _fail(f"NodeName={n.name} {n.problem.split(' ', 1)[0]}", n.problem.split(" ", 1)[1])
    if not any(n.gpus for n in mine):
        raise _fail(f"Gres= of the nodes of {where}", "no node of the partition has a GPU")
    warnings = []
    params = {p.split("=", 1)[0]: (p.split("=", 1)[1] if "=" in p else "")
              for p in config.get("SchedulerParameters", "").replace("(null)", "").split(",") if p}
    if "defer" in params:
        warnings.append("SchedulerParameters has defer: each decided run waits for Slurm's next scheduling pass")
    for key, default in (("batch_sched_delay", "3"), ("sched_min_interval", "2000000")):
        value = params.get(key, default)
        if value not in ("0", ""):
            warnings.append(f"SchedulerParameters {key}={value}{' (the default)' if key not in params else ''}: "
                            f"a decided run may wait that long to start; set {key}=0")
    timeout = _duration_seconds(config.get("SlurmdTimeout", ""))
    if timeout is not None and timeout > 60:
        warnings.append(f"SlurmdTimeout={timeout:g} s: a node whose slurmd died is noticed only after up to a third "
                        "of that (Slurm's pings); its runs are requeued then")
    return warnings
