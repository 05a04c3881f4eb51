"""Reader of Gavel's ``simulation_throughputs.json`` (DESIGN §5, point 2).

Gavel (Narayanan et al., OSDI 2020) published throughputs in steps/s of 26 job types on k80, p100
and v100 GPUs, measured consolidated (``"v100"``) and spread over machines
(``"v100_unconsolidated"``). Under each GPU key, ``"('<job type>', <GPU count>)"`` maps to
``{"null": alone, "('<other type>', <count>)": [self, other] while the two share the GPUs}``;
0.0 marks a job or a pair that did not fit in memory. Reading it gives a :class:`TableModel` that
is ``measured`` with v100 as the reference GPU type. Gavel published no restart costs: its job types
get the built-in model's (:data:`tesserae.profiles.restart_model.GAVEL`, from Gavel's own models).
"""

from __future__ import annotations

import ast
import functools
import math
from pathlib import Path
from typing import Any

from tesserae.core.errors import InputError
from tesserae.profiles.json_file import read_json_file
from tesserae.profiles.restart_model import COMMON, GAVEL
from tesserae.profiles.table_model import AloneKey, PairKey, TableModel

REFERENCE_GPU_TYPE = "v100"
_UNCONSOLIDATED = "_unconsolidated"


def looks_like_gavel(doc: Any) -> bool:
    """Whether a parsed JSON document has Gavel's shape (GPU type -> "('<type>', <n>)" -> ...)."""
    if not isinstance(doc, dict) or not doc:
        return False
    if not all(isinstance(v, dict) for v in doc.values()):
        return False
    inner = [k for v in doc.values() for k in v]
    return bool(inner) and all(isinstance(k, str) and k.lstrip().startswith("(") for k in inner)


def read_gavel(path: str | Path) -> TableModel:
    """Read Gavel's throughput file; any malformed part raises InputError naming file and field."""
    path = Path(path)
    return gavel_from_document(read_json_file(path, "Gavel throughput file"), source=str(path))


def gavel_from_document(doc: Any, source: str = "<gavel>") -> TableModel:
    """Build the TableModel from an already-parsed Gavel document (``source`` names it in errors)."""
    if not isinstance(doc, dict) or not doc:
        raise InputError("expected a JSON object keyed by GPU type (k80, v100_unconsolidated, ...)",
                         path=source)
    alone: dict[AloneKey, float] = {}
    pairs: dict[PairKey, tuple[float, float]] = {}
    for top, table in doc.items():
        consolidated = not top.endswith(_UNCONSOLIDATED)
        gpu_type = top if consolidated else top[: -len(_UNCONSOLIDATED)]
        if not gpu_type or not isinstance(table, dict):
            raise InputError("expected a GPU type mapping to an object of job entries",
                             path=source, field=top)
        for job_key, entry in table.items():
            where = f'{top}["{job_key}"]'
            job_type, num_gpus = _parse_job_key(job_key, source, where)
            if not isinstance(entry, dict) or "null" not in entry:
                raise InputError("expected an object with key \"null\" (the alone throughput)",
                                 path=source, field=where)
            for other_key, value in entry.items():
                field = f'{where}["{other_key}"]'
                if other_key == "null":
                    alone[(job_type, num_gpus, gpu_type, consolidated)] = _number(value, source, field)
                    continue
                other_type, other_gpus = _parse_job_key(other_key, source, field)
                if not isinstance(value, list) or len(value) != 2:
                    raise InputError("expected [self, other] throughputs", path=source, field=field)
                pairs[(job_type, num_gpus, gpu_type, consolidated, other_type, other_gpus)] = (
                    _number(value[0], source, f"{field}[0]"), _number(value[1], source, f"{field}[1]"))
    return TableModel(name=f"gavel:{Path(source).name}", reference_gpu_type=REFERENCE_GPU_TYPE,
                      alone=alone, pairs=pairs, measured=True, restart_defaults=(GAVEL, COMMON))


def _parse_job_key(key: str, source: str, field: str) -> tuple[str, int]:
    value = _literal(key)
    if (not isinstance(value, tuple) or len(value) != 2 or not isinstance(value[0], str)
            or not isinstance(value[1], int) or isinstance(value[1], bool) or value[1] < 1):
        raise InputError(f"expected a key like \"('ResNet-50 (batch size 32)', 2)\", got {key!r}",
                         path=source, field=field)
    return value[0], value[1]


@functools.lru_cache(maxsize=4096)
def _literal(key: str) -> Any:
    """``ast.literal_eval`` of a job key, None if it is not a literal. Cached: Gavel's table names each
    job key once per GPU type and once per partner (10,830 parses of a few hundred keys)."""
    try:
        return ast.literal_eval(key)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def _number(value: Any, source: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise InputError(f"expected a finite throughput >= 0, got {value!r}", path=source, field=field)
    return float(value)
