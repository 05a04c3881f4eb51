"""Fixtures of the runtime tests. They stop what they start: the servers (SIGTERM, then SIGKILL)
and then every job process whose run marker lies in their state folder."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from support.server import Server, kill_jobs, servers_started_by, start_server


@pytest.fixture
def servers() -> Iterator[Callable[..., Server]]:
    """Factory of servers; everything they started is stopped at the end of the test."""
    with servers_started_by(start_server) as make:
        yield make


@pytest.fixture(scope="session")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One FIFO server with 2 virtual GPUs shared by the API and CLI tests (one per xdist worker).

    Tests that use it run one after the other and leave nothing running behind them."""
    state = tmp_path_factory.mktemp("shared") / "state"
    s = start_server(state, gpus=2, policy="fifo", grace=1.0)
    yield s
    s.stop()
    kill_jobs(state)
