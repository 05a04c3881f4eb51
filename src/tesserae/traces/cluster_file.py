"""Cluster specs from files: Tiresias' cluster-spec CSV, or a spec string.

Tiresias describes a cluster with one row ``num_switch,num_node_p_switch,num_gpu_p_node,
num_cpu_p_node,mem_p_node``. Each switch becomes a rack of ``num_node_p_switch`` nodes; all GPUs
are ``v100``, the reference type of the built-in model (Tiresias' testbed). CPUs and memory are
checked (when present) but not modelled: Tesserae schedules GPUs.
"""

from __future__ import annotations

from pathlib import Path

from tesserae.core.cluster import DEFAULT_GPU_TYPE, Cluster, Node, parse_cluster_spec
from tesserae.core.errors import InputError
from tesserae.traces._fields import cell, check_file, csv_rows, header_index, integer, number, open_text

REQUIRED = ("num_switch", "num_node_p_switch", "num_gpu_p_node")
OPTIONAL = ("num_cpu_p_node", "mem_p_node")
CLUSTER_FILE_SUFFIXES = (".csv",)


def read_cluster_csv(path: str | Path, gpu_type: str = DEFAULT_GPU_TYPE) -> Cluster:
    """A Cluster from a Tiresias cluster-spec CSV (exactly one data row)."""
    p = check_file(path)
    with open_text(p) as f:
        records = csv_rows(f, p)
        first = next(records, None)
        if first is None:
            raise InputError("empty cluster file; expected a header and one row", path=str(p), line=1,
                             field="num_switch")
        col = header_index(first[1], REQUIRED, OPTIONAL, p)
        spec = next(records, None)
        if spec is None:
            raise InputError("no cluster row after the header", path=str(p), line=2, field="num_switch")
        line, row = spec
        values: dict[str, int] = {}
        for name in REQUIRED:
            values[name] = integer(cell(row, col[name], p, line, name), p, line, name)
            if values[name] < 1:
                raise InputError(f"must be at least 1, got {values[name]}", path=str(p), line=line,
                                 field=name)
        for name in OPTIONAL:
            if name in col and col[name] < len(row):
                number(row[col[name]], p, line, name)
        extra = next(records, None)
        if extra is not None:
            raise InputError("a Tiresias cluster spec has exactly one row", path=str(p), line=extra[0],
                             field="num_switch")
    nodes: list[Node] = []
    per_node = values["num_gpu_p_node"]
    for rack in range(values["num_switch"]):
        for _ in range(values["num_node_p_switch"]):
            i = len(nodes)
            nodes.append(Node(index=i, gpu_type=gpu_type, num_gpus=per_node, rack=rack,
                              first_gpu=i * per_node))
    return Cluster(nodes)


def load_cluster(spec: str | Path) -> Cluster:
    """A cluster from a file path (Tiresias CSV) or a spec string like ``16x4`` or ``8x8:a100``.

    A name ending in .csv is always a file; anything else is parsed as a spec first and read as a
    Tiresias CSV only when it is not a valid spec but names an existing file.
    """
    s = str(spec).strip()
    p = Path(s)
    if p.suffix.lower() in CLUSTER_FILE_SUFFIXES:
        return read_cluster_csv(p)
    try:
        return parse_cluster_spec(s)
    except InputError:
        if p.is_file():
            return read_cluster_csv(p)
        raise
