"""The measured profile as a document in the project's format (``tesserae.profiles.tesserae_profile``),
and writing it: what ``tesserae profile`` leaves behind for the simulator to read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tesserae.core.errors import InputError
from tesserae.profiler.runner import ProfileResult


def _num(x: float) -> float:
    """Six significant digits: readable JSON, and a positive rate never rounds to 0."""
    return float(f"{x:.6g}")


def profile_document(result: ProfileResult) -> dict[str, Any]:
    """The profile in the project's format (``tesserae.profiles.tesserae_profile``), validated."""
    from tesserae.core.restart import RestartCost
    from tesserae.profiles.table_model import TableModel
    from tesserae.profiles.tesserae_profile import MEASURED_SOURCE, tesserae_profile_document

    g = result.device.gpu_type
    alone = {(model, n, g, True): 0.0 if o.oom else _num(o.throughput) for (model, n), o in result.solo.items()}
    memory = {(model, n, g, True): _num(o.memory_gb) for (model, n), o in result.solo.items()
              if not o.oom and o.memory_gb is not None}
    pairs: dict[tuple[str, int, str, bool, str, int], tuple[float, float]] = {}
    for (a, b, n), (oa, ob) in result.pairs.items():
        if oa.oom or ob.oom:
            rates = (0.0, 0.0)
        elif a == b:  # the same job twice: either process speaks for the type
            mean = _num((oa.throughput + ob.throughput) / 2)
            rates = (mean, mean)
        else:
            rates = (_num(oa.throughput), _num(ob.throughput))
        pairs[(a, n, g, True, b, n)] = rates
    skew: dict[str, float] = {}
    for (model, _n), o in sorted(result.solo.items(), key=lambda kv: kv[0][1]):
        if o.skew is not None and model not in skew:
            skew[model] = _num(min(1.0, max(0.0, o.skew)))
    restart = {name: RestartCost(float(o.checkpoint_bytes), _num(o.startup_seconds), measured=True,
                                 source=MEASURED_SOURCE, save_seconds=_num(o.save_seconds),
                                 restore_seconds=_num(o.restore_seconds), parameters=o.parameters)
               for name, o in result.restart.items()}
    table = TableModel(name="tesserae profile", reference_gpu_type=g, alone=alone, pairs=pairs, memory=memory,
                       skew=skew, measured=True, restart=restart)
    return tesserae_profile_document(table, gpu=result.device.gpu_info(result.date))


def write_profile(result: ProfileResult, path: str | Path) -> dict[str, Any]:
    """Write the profile JSON to ``path`` and check it reads back; returns the document."""
    from tesserae.profiles.tesserae_profile import tesserae_profile_from_document

    doc = profile_document(result)
    tesserae_profile_from_document(doc, source=str(path))  # the reader accepts what we write
    try:
        Path(path).write_text(json.dumps(doc, indent=1) + "\n")
    except OSError as exc:
        raise InputError(f"cannot write profile: {exc.strerror}", path=str(path)) from exc
    return doc
