"""Reader of Blox/Tesserae's ``norm_speed.csv``: co-location speeds of large multi-strategy jobs.

Columns: ``index, model1, dataset1, gpu_num1, batch_size1, speed1, co_pipeline_rank,
pipeline_strategy, model2, dataset2, gpu_num2, batch_size2, speed2``. A row with a
``pipeline_strategy`` (a layer split such as "10,14", or ``TP24`` / ``DP24``) describes a large job
(Bert-Large, GPT2-Medium) launched with that strategy, alone when ``model2`` is ``Empty``, else next
to the small job ``model2``. A row without one (``NA``) is a plain pair of small jobs. Speeds are
normalised to running alone (for a large job: to its data-parallel run, 1.0); 0.0 marks
out-of-memory. ``NA`` is allowed in the descriptive columns (datasets, ranks, strategy).

Job type names: a large job is its model name ("Bert-Large": its micro-batch differs per
strategy, the job is the same); a small job is "<model> (batch size <n>)", because each batch
size was measured separately ("resnet50 (batch size 32)").

As a ThroughputModel (:func:`load_norm_speed`) the table is normalised and GPU-type agnostic
(GPU type "*"): every job alone runs at ``base_rate`` iterations/s (a large job with its best
solo strategy), and in a pair each side runs at ``base_rate`` x its speed relative to running
alone, with the large job using the strategy of best sharing gain. The file has no restart costs:
its job types get the built-in model's (:data:`tesserae.profiles.restart_model.BLOX`).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from tesserae.core.errors import InputError
from tesserae.profiles.colocation import ColocationTable, PairSpeeds
from tesserae.profiles.restart_model import BLOX, COMMON
from tesserae.profiles.table_model import ANY_GPU, AloneKey, PairKey, TableModel

REQUIRED_COLUMNS = ("model1", "gpu_num1", "batch_size1", "speed1", "pipeline_strategy",
                    "model2", "gpu_num2", "batch_size2", "speed2")
NA = "NA"
EMPTY = "Empty"


def job_type_name(model: str, batch_size: str) -> str:
    """The job type of a small job: its model and batch size, in Gavel's naming style."""
    if batch_size in ("", "0", NA):
        return model
    return f"{model} (batch size {batch_size})"


@dataclass
class NormSpeedData:
    """Everything in the file: the strategy table of large jobs and the plain pairs of small ones."""

    table: ColocationTable
    # (job type, GPUs, partner type, partner GPUs) -> (speed1, speed2), None = out of memory
    plain_pairs: dict[tuple[str, int, str, int], PairSpeeds] = field(default_factory=dict)
    # (job type, GPUs) of every small job seen (alone rows, plain pairs, partners of large jobs)
    small_jobs: set[tuple[str, int]] = field(default_factory=set)


def read_norm_speed(path: str | Path) -> ColocationTable:
    """The large jobs' strategies and pair speeds (see :class:`ColocationTable`)."""
    return parse_norm_speed(path).table


def load_norm_speed(path: str | Path, *, base_rate: float = 1.0,
                    reference_gpu_type: str = "v100") -> TableModel:
    """The file as a normalised, GPU-type-agnostic TableModel (see module docstring)."""
    path = Path(path)
    return norm_speed_model(parse_norm_speed(path), name=f"norm-speed:{path.name}", base_rate=base_rate,
                            reference_gpu_type=reference_gpu_type)


def norm_speed_model(data: NormSpeedData, *, name: str = "norm-speed", base_rate: float = 1.0,
                     reference_gpu_type: str = "v100") -> TableModel:
    """Turn parsed data into rates: alone = ``base_rate``; pairs scaled by their normalised speeds."""
    table = data.table
    alone: dict[AloneKey, float] = {}
    pairs: dict[PairKey, tuple[float, float]] = {}
    for large, gpus in table.large_types():
        alone[(large, gpus, ANY_GPU, True)] = base_rate if table.best_solo_strategy(large, gpus) else 0.0
        base = table.solo_base(large, gpus)
        for small, small_gpus in table.partners(large, gpus):
            best = table.best_strategy(large, gpus, small, small_gpus)
            pairs[(large, gpus, ANY_GPU, True, small, small_gpus)] = (
                (0.0, 0.0) if best is None else (base_rate * best[1] / base, base_rate * best[2]))
    for small, small_gpus in sorted(data.small_jobs):
        alone[(small, small_gpus, ANY_GPU, True)] = base_rate
    for (a, na, b, nb), speeds in data.plain_pairs.items():
        pairs[(a, na, ANY_GPU, True, b, nb)] = (
            (0.0, 0.0) if speeds is None else (base_rate * speeds[0], base_rate * speeds[1]))
    return TableModel(name=name, reference_gpu_type=reference_gpu_type, alone=alone, pairs=pairs,
                      measured=True, colocation=table, restart_defaults=(BLOX, COMMON))


def parse_norm_speed(path: str | Path) -> NormSpeedData:
    """Parse the CSV; a malformed row raises InputError with the file, line and field."""
    path = Path(path)
    source = str(path)
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            return _parse(fh, source)
    except OSError as exc:
        raise InputError(f"cannot read co-location table: {exc.strerror}", path=source) from exc
    except UnicodeDecodeError as exc:
        raise InputError("not a UTF-8 text file", path=source) from exc


def _parse(fh: TextIO, source: str) -> NormSpeedData:
    reader = csv.reader(fh)
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise InputError("empty file: expected a header row", path=source, line=1) from None
    except csv.Error as exc:
        raise InputError(f"bad CSV: {exc}", path=source, line=1) from exc
    for col in REQUIRED_COLUMNS:
        if col not in header:
            raise InputError(f"missing column (header has {', '.join(header)})", path=source, line=1,
                             field=col)
    solo: dict[tuple[str, int], list[tuple[str, float]]] = {}
    solo_lines: dict[tuple[str, int, str], int] = {}
    pairs: dict[tuple[str, int, str, str, int], PairSpeeds] = {}
    pair_lines: dict[tuple, int] = {}
    data = NormSpeedData(table=ColocationTable())
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise InputError(f"bad CSV: {exc}", path=source, line=reader.line_num) from exc
        line = reader.line_num
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise InputError(f"expected {len(header)} fields, got {len(row)}", path=source, line=line)
        rec = {h: c.strip() for h, c in zip(header, row, strict=True)}
        model1 = _name(rec, "model1", source, line)
        gpus1 = _count(rec, "gpu_num1", source, line)
        speed1 = _speed(rec, "speed1", source, line)
        strategy = rec["pipeline_strategy"]
        model2 = _name(rec, "model2", source, line)
        partner: tuple[str, int, float] | None = None
        if model2 != EMPTY:
            partner = (job_type_name(model2, rec["batch_size2"]), _count(rec, "gpu_num2", source, line),
                       _speed(rec, "speed2", source, line))
        if strategy in ("", NA):  # plain row of small jobs
            small = job_type_name(model1, rec["batch_size1"])
            data.small_jobs.add((small, gpus1))
            if partner is None:
                continue
            data.small_jobs.add(partner[:2])
            key = (small, gpus1, partner[0], partner[1])
            _once(pair_lines, key, line, source, f"pair {small} x {partner[0]} on {gpus1} GPUs")
            data.plain_pairs[key] = _pair(speed1, partner[2])
        elif partner is None:  # large job alone with this strategy
            _once(solo_lines, (model1, gpus1, strategy), line, source,
                  f"{model1} on {gpus1} GPUs with strategy {strategy!r} alone")
            solo.setdefault((model1, gpus1), []).append((strategy, speed1))
        else:
            data.small_jobs.add(partner[:2])
            key5 = (model1, gpus1, strategy, partner[0], partner[1])
            _once(pair_lines, key5, line, source,
                  f"{model1} on {gpus1} GPUs with strategy {strategy!r} next to {partner[0]}")
            pairs[key5] = _pair(speed1, partner[2])
    for key5 in pairs:
        if (key5[0], key5[1], key5[2]) not in solo_lines:
            raise InputError(f"{key5[0]} on {key5[1]} GPUs with strategy {key5[2]!r} has pair rows but no "
                             f"solo row (model2 {EMPTY}) to normalise against", path=source,
                             line=pair_lines[key5], field="pipeline_strategy")
    data.table = ColocationTable(solo=solo, pairs=pairs)
    return data


def _pair(speed1: float, speed2: float) -> PairSpeeds:
    return None if speed1 <= 0.0 or speed2 <= 0.0 else (speed1, speed2)


def _once(seen: dict, key: tuple, line: int, source: str, what: str) -> None:
    if key in seen:
        raise InputError(f"duplicate row for {what} (first at line {seen[key]})", path=source, line=line)
    seen[key] = line


def _name(rec: dict[str, str], col: str, source: str, line: int) -> str:
    value = rec[col]
    if not value or value == NA:
        raise InputError("expected a model name", path=source, line=line, field=col)
    return value


def _count(rec: dict[str, str], col: str, source: str, line: int) -> int:
    try:
        n = int(rec[col])
    except ValueError:
        n = 0
    if n < 1:
        raise InputError(f"expected a GPU count >= 1, got {rec[col]!r}", path=source, line=line, field=col)
    return n


def _speed(rec: dict[str, str], col: str, source: str, line: int) -> float:
    try:
        x = float(rec[col])
    except ValueError:
        x = -1.0
    if not math.isfinite(x) or x < 0.0:
        raise InputError(f"expected a normalised speed >= 0, got {rec[col]!r}", path=source, line=line,
                         field=col)
    return x
