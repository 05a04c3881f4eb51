"""Fixtures of the runtime tests. They stop what they start: the servers (SIGTERM, then SIGKILL)
and then every job process whose run marker lies in their state folder."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rt_helpers import Server, kill_jobs, start_server


@pytest.fixture
def servers() -> Iterator[Callable[..., Server]]:
    """Factory of servers; everything they started is stopped at the end of the test."""
    started: list[Server] = []

    def make(state: Path, *extra: str, **kw: Any) -> Server:
        s = start_server(state, *extra, **kw)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()
    for state in {s.state for s in started}:
        kill_jobs(state)


@pytest.fixture(scope="session")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One FIFO server with 2 virtual GPUs shared by the API and CLI tests (one per xdist worker).

    Tests that use it run one after the other and leave nothing running behind them."""
    state = tmp_path_factory.mktemp("shared") / "state"
    s = start_server(state, gpus=2, policy="fifo", grace=1.0)
    yield s
    s.stop()
    kill_jobs(state)
