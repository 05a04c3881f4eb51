"""What the steps after admission read of one Tesserae decision: the admitted jobs and their types."""

from __future__ import annotations

from typing import Protocol

from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobTable
from tesserae.placement._rates import RateBook


class AdmittedJobs(Protocol):
    """The admitted jobs (hosts, in priority order), the GPU type each was given, and the rates.

    ``TesseraePlacer`` is one; the type choice changes ``type_of``, the pairing reads it.
    """

    cluster: Cluster
    table: JobTable
    hosts: list[int]
    type_of: dict[int, int]
    book: RateBook

    def job_class(self, row: int) -> tuple[str, int]:
        """(job type, GPU count) of a row."""
        ...

    def previous_type(self, row: int) -> int:
        """The GPU type the row ran on last round, -1 if it did not run."""
        ...
