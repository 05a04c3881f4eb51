"""Traces: readers for each trace format, the synthetic default workload, cluster files, summaries.

Every reader returns ``JobSpec``s in DESIGN §2 units (seconds from the first submission, work in
iterations), sorted by (submit_time, job_id), and raises ``InputError`` naming file, line and
field on bad input.
"""

from tesserae.traces.cluster_file import load_cluster, read_cluster_csv
from tesserae.traces.info import trace_info
from tesserae.traces.readers import (
    FORMATS,
    read_canonical,
    read_canonical_csv,
    read_canonical_parquet,
    read_gavel,
    read_philly,
    read_tiresias,
    read_trace,
    write_canonical,
    write_canonical_csv,
    write_canonical_parquet,
)
from tesserae.traces.synthetic import generate_workload

__all__ = [
    "FORMATS",
    "generate_workload",
    "load_cluster",
    "read_canonical",
    "read_canonical_csv",
    "read_canonical_parquet",
    "read_cluster_csv",
    "read_gavel",
    "read_philly",
    "read_tiresias",
    "read_trace",
    "trace_info",
    "write_canonical",
    "write_canonical_csv",
    "write_canonical_parquet",
]
