"""Data model only, no I/O: cluster, jobs, plans and the throughput-model interface."""

from tesserae.core.cluster import Cluster, Node, parse_cluster_spec
from tesserae.core.jobs import JobSpec, JobStatus, JobTable
from tesserae.core.plan import Assignment, Plan
from tesserae.core.throughput import ThroughputModel

__all__ = [
    "Assignment",
    "Cluster",
    "JobSpec",
    "JobStatus",
    "JobTable",
    "Node",
    "Plan",
    "ThroughputModel",
    "parse_cluster_spec",
]
