"""The project's own profile format (DESIGN §5, point 1): one JSON document, validated strictly.

``tesserae profile`` writes it after measuring real GPUs; the readers of published tables can be
converted to it (``write_tesserae_profile(read_gavel(...), path)``). Shape::

    {"format": "tesserae-profile", "version": 1,
     "gpu": {"name", "driver", "torch_version", "date", "gpu_type"} | null,
     "reference_gpu_type": "v100",
     "entries": [{"job_type", "num_gpus", "gpu_type", "consolidated", "throughput", "memory_gb"}],
     "pairs": [{"job_type", "num_gpus", "partner_type", "partner_num_gpus", "gpu_type",
                "throughput", "partner_throughput", "oom", "consolidated"}],
     "skew": {"<job type>": 0.11},
     "strategies": [{"job_type", "num_gpus", "strategy", "partner_type", "partner_num_gpus",
                     "speed", "partner_speed", "oom"}],
     "restart": [{"job_type", "checkpoint_bytes", "startup_seconds", "save_seconds",
                  "restore_seconds", "parameters"}]}

Throughputs are iterations/s; 0.0 (or ``"oom": true``) means it does not fit. ``gpu_type`` "*"
means the row holds for any GPU type. Choices beyond the brief, all optional with defaults:
``gpu`` may be null (a converted table has no single GPU), ``memory_gb`` defaults to null, a
pair's ``consolidated`` defaults to true (Gavel also measured pairs spread over machines), and
``strategies`` holds :class:`ColocationTable` rows: a row without ``partner_type`` is the large
job alone with that strategy, a row with one is the pair (``speed`` = the large job's,
``partner_speed`` = the partner's, both normalised as in Blox's ``norm_speed.csv``). ``restart``
holds one measured row per job type: the checkpoint's size (model and optimizer state, bytes, an
integer), the seconds a fresh process takes to start and build the job, and, for provenance, the
seconds saving and restoring that checkpoint took where it was measured and the parameter count
(those three may be null). A job type without a row gets the built-in model's restart cost.

Any invalid field raises :class:`InputError` naming the file and the JSON path of the field
(for example ``entries[3].throughput``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tesserae.core.errors import InputError
from tesserae.core.restart import RestartCost
from tesserae.profiles.colocation import ColocationTable, PairSpeeds
from tesserae.profiles.json_file import read_json_file
from tesserae.profiles.table_model import AloneKey, PairKey, TableModel

FORMAT = "tesserae-profile"
VERSION = 1

Name = Annotated[str, Field(min_length=1)]
Count = Annotated[int, Field(ge=1)]
Rate = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]


class _Strict(BaseModel):
    # strict: "2" is not 2 and 1 is not true; a profile is machine-written, so a type slip is a bug.
    model_config = ConfigDict(extra="forbid", strict=True)


class GpuInfo(_Strict):
    """The machine a profile was measured on, for provenance in reports."""

    name: str
    driver: str
    torch_version: str
    date: str
    gpu_type: Name


class EntryRecord(_Strict):
    job_type: Name
    num_gpus: Count
    gpu_type: Name
    consolidated: bool
    throughput: Rate
    memory_gb: Rate | None = None


class PairRecord(_Strict):
    job_type: Name
    num_gpus: Count
    partner_type: Name
    partner_num_gpus: Count
    gpu_type: Name
    throughput: Rate
    partner_throughput: Rate
    oom: bool = False
    consolidated: bool = True


class StrategyRecord(_Strict):
    job_type: Name
    num_gpus: Count
    strategy: Name
    partner_type: Name | None = None
    partner_num_gpus: Count | None = None
    speed: Rate
    partner_speed: Rate | None = None
    oom: bool = False


class RestartRecord(_Strict):
    job_type: Name
    checkpoint_bytes: Annotated[int, Field(ge=0)]
    startup_seconds: Rate
    save_seconds: Rate | None = None
    restore_seconds: Rate | None = None
    parameters: Annotated[int, Field(ge=0)] | None = None


class ProfileDocument(_Strict):
    format: Literal["tesserae-profile"]
    version: Literal[1]
    gpu: GpuInfo | None = None
    reference_gpu_type: Name
    entries: list[EntryRecord]
    pairs: list[PairRecord] = Field(default_factory=list)
    skew: dict[str, Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]] = Field(
        default_factory=dict)
    strategies: list[StrategyRecord] = Field(default_factory=list)
    restart: list[RestartRecord] = Field(default_factory=list)


#: Where a measured restart row came from (RestartCost.source).
MEASURED_SOURCE = "measured by tesserae profile"


def is_tesserae_profile(doc: Any) -> bool:
    """Whether a parsed JSON document declares this format (its fields are checked on reading)."""
    return isinstance(doc, dict) and doc.get("format") == FORMAT


def read_tesserae_profile(path: str | Path) -> TableModel:
    """Read and validate a profile file into a TableModel."""
    path = Path(path)
    return tesserae_profile_from_document(read_json_file(path, "profile"), source=str(path))


def tesserae_profile_from_document(doc: Any, source: str = "<profile>") -> TableModel:
    """Validate an already-parsed document (``source`` names it in errors) into a TableModel."""
    try:
        parsed = ProfileDocument.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        message = err["msg"] if err["type"] == "missing" else f"{err['msg']}, got {_short(err['input'])}"
        raise InputError(message, path=source, field=_json_path(err["loc"]) or None) from exc

    alone: dict[AloneKey, float] = {}
    memory: dict[AloneKey, float] = {}
    for i, e in enumerate(parsed.entries):
        key = (e.job_type, e.num_gpus, e.gpu_type, e.consolidated)
        if key in alone:
            raise InputError("duplicate entry for this job type, GPU count, GPU type and consolidation",
                             path=source, field=f"entries[{i}]")
        alone[key] = e.throughput
        if e.memory_gb is not None:
            memory[key] = e.memory_gb
    pairs: dict[PairKey, tuple[float, float]] = {}
    for i, p in enumerate(parsed.pairs):
        pkey = (p.job_type, p.num_gpus, p.gpu_type, p.consolidated, p.partner_type, p.partner_num_gpus)
        if pkey in pairs:
            raise InputError("duplicate pair", path=source, field=f"pairs[{i}]")
        pairs[pkey] = (0.0, 0.0) if p.oom else (p.throughput, p.partner_throughput)
    colocation = _colocation(parsed.strategies, source) if parsed.strategies else None
    metadata = parsed.gpu.model_dump() if parsed.gpu is not None else {}
    restart = _restart(parsed.restart, source)
    try:
        return TableModel(name=f"tesserae-profile:{Path(source).name}",
                          reference_gpu_type=parsed.reference_gpu_type, alone=alone, pairs=pairs,
                          memory=memory, skew=parsed.skew, measured=True, colocation=colocation,
                          metadata=metadata, restart=restart)
    except InputError as exc:
        raise InputError(str(exc), path=source) from exc


def _restart(records: list[RestartRecord], source: str) -> dict[str, RestartCost]:
    out: dict[str, RestartCost] = {}
    for i, r in enumerate(records):
        if r.job_type in out:
            raise InputError("duplicate restart row for this job type", path=source, field=f"restart[{i}].job_type")
        out[r.job_type] = RestartCost(float(r.checkpoint_bytes), r.startup_seconds, measured=True,
                                      source=MEASURED_SOURCE, save_seconds=r.save_seconds,
                                      restore_seconds=r.restore_seconds, parameters=r.parameters)
    return out


def _colocation(records: list[StrategyRecord], source: str) -> ColocationTable:
    solo: dict[tuple[str, int], list[tuple[str, float]]] = {}
    seen: set[tuple[str, int, str]] = set()
    pairs: dict[tuple[str, int, str, str, int], PairSpeeds] = {}
    for i, r in enumerate(records):
        where = f"strategies[{i}]"
        if r.partner_type is None:
            if r.partner_num_gpus is not None or r.partner_speed is not None:
                raise InputError("a solo row (no partner_type) has no partner fields",
                                 path=source, field=f"{where}.partner_type")
            if (r.job_type, r.num_gpus, r.strategy) in seen:
                raise InputError("duplicate solo strategy", path=source, field=where)
            seen.add((r.job_type, r.num_gpus, r.strategy))
            solo.setdefault((r.job_type, r.num_gpus), []).append((r.strategy, 0.0 if r.oom else r.speed))
            continue
        if r.partner_speed is None and not r.oom:
            raise InputError("a pair row needs partner_speed (or oom: true)",
                             path=source, field=f"{where}.partner_speed")
        key = (r.job_type, r.num_gpus, r.strategy, r.partner_type,
               r.num_gpus if r.partner_num_gpus is None else r.partner_num_gpus)
        if key in pairs:
            raise InputError("duplicate strategy pair", path=source, field=where)
        speed2 = r.partner_speed or 0.0
        pairs[key] = None if r.oom or r.speed <= 0.0 or speed2 <= 0.0 else (r.speed, speed2)
    return ColocationTable(solo=solo, pairs=pairs)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _json_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def tesserae_profile_document(model: TableModel, gpu: GpuInfo | Mapping[str, str] | None = None) -> dict:
    """The JSON document for ``model`` (its measured tables only; derived rates are not written).

    ``gpu`` defaults to the model's own metadata when that is a complete GPU description.
    """
    if gpu is None and model.metadata:
        try:
            gpu = GpuInfo.model_validate(model.metadata)
        except ValidationError:
            gpu = None
    gpu_info = None if gpu is None else (gpu if isinstance(gpu, GpuInfo) else GpuInfo.model_validate(gpu))
    entries = [{"job_type": jt, "num_gpus": n, "gpu_type": g, "consolidated": c, "throughput": r,
                "memory_gb": model.memory.get((jt, n, g, c))}
               for (jt, n, g, c), r in sorted(model.alone.items())]
    pairs = [{"job_type": jt, "num_gpus": n, "partner_type": pt, "partner_num_gpus": pn, "gpu_type": g,
              "throughput": own, "partner_throughput": other, "oom": own <= 0.0 or other <= 0.0,
              "consolidated": c}
             for (jt, n, g, c, pt, pn), (own, other) in sorted(model.pairs.items())]
    return {
        "format": FORMAT,
        "version": VERSION,
        "gpu": None if gpu_info is None else gpu_info.model_dump(),
        "reference_gpu_type": model.reference_gpu_type,
        "entries": entries,
        "pairs": pairs,
        "skew": dict(sorted(model.explicit_skew.items())),
        "strategies": [] if model.colocation is None else _strategy_rows(model.colocation),
        "restart": [_restart_row(jt, c) for jt, c in sorted(model.restart.items()) if c.measured],
    }


def _restart_row(job_type: str, cost: RestartCost) -> dict:
    return {"job_type": job_type, "checkpoint_bytes": round(cost.checkpoint_bytes),
            "startup_seconds": cost.startup_seconds, "save_seconds": cost.save_seconds,
            "restore_seconds": cost.restore_seconds, "parameters": cost.parameters}


def _strategy_rows(table: ColocationTable) -> list[dict]:
    rows: list[dict] = []
    for (large, gpus), strategies in table.solo.items():
        rows += [{"job_type": large, "num_gpus": gpus, "strategy": s, "speed": speed, "oom": speed <= 0.0}
                 for s, speed in strategies]
    for (large, gpus, strategy, small, small_gpus), speeds in table.pairs.items():
        rows.append({"job_type": large, "num_gpus": gpus, "strategy": strategy, "partner_type": small,
                     "partner_num_gpus": small_gpus, "speed": 0.0 if speeds is None else speeds[0],
                     "partner_speed": 0.0 if speeds is None else speeds[1], "oom": speeds is None})
    return rows


def write_tesserae_profile(model: TableModel, path: str | Path,
                           gpu: GpuInfo | Mapping[str, str] | None = None) -> None:
    """Write ``model`` in this format (see :func:`tesserae_profile_document`)."""
    text = json.dumps(tesserae_profile_document(model, gpu), indent=1)
    try:
        Path(path).write_text(text + "\n")
    except OSError as exc:
        raise InputError(f"cannot write profile: {exc.strerror}", path=str(path)) from exc
