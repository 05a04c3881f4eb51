"""Fixtures of the Slurm tests: real Slurm daemons on this machine (``support.slurm_cluster``).

``slurm_one_host``: munged, MariaDB, slurmdbd, slurmctld and one slurmd with 4 GPUs (placeholder
device files), started once for the session and stopped at its end. Every test module here is
marked ``slurm`` and ``xdist_group("slurm")`` (one worker holds the daemons). Without root or the
packages the tests skip with the reason (``.ci/run`` installs them).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support import slurm_cluster


@pytest.fixture(scope="session")
def slurm_one_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurm_cluster.SlurmCluster]:
    why = slurm_cluster.usable(accounting=True)
    if why is not None:
        pytest.skip(why)
    cluster = slurm_cluster.SlurmCluster(tmp_path_factory.mktemp("slurm-one-host"), accounting=True)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
