"""Shared fixtures for the profile tests: tiny hand-written tables and the shared reference data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"

# A tiny table in Gavel's shape; values chosen so that every derived rate is easy to check by hand.
TINY_GAVEL = {
    "v100": {
        "('A', 1)": {"null": 10.0, "('B', 1)": [6.0, 3.0], "('ResNet-50 (batch size 64)', 1)": [0.0, 0.0]},
        "('B', 1)": {"null": 5.0, "('A', 1)": [3.0, 6.0]},
        "('ResNet-50 (batch size 64)', 1)": {"null": 2.0},
        "('A', 2)": {"null": 18.0, "('B', 2)": [9.0, 4.0]},
        "('B', 2)": {"null": 8.0, "('A', 2)": [4.0, 9.0]},
        "('A', 4)": {"null": 30.0},
    },
    "v100_unconsolidated": {
        "('A', 1)": {"null": 10.0},
        "('A', 2)": {"null": 12.0},
    },
    "k80": {
        "('A', 1)": {"null": 3.0},
        "('B', 1)": {"null": 1.5},
    },
}

_NORM_SPEED_HEADER = ("index,model1,dataset1,gpu_num1,batch_size1,speed1,co_pipeline_rank,pipeline_strategy,"
                      "model2,dataset2,gpu_num2,batch_size2,speed2\n")
# Large job L on 2 GPUs with three strategies; S (batch size 32) next to it. Gains (speed1 + speed2 - 1):
# "1,3": 0.5 + 0.6 - 1 = 0.1; "2,2": 0.7 + 0.8 - 1 = 0.5; DP: out of memory. T fits with no strategy.
TINY_NORM_SPEED = _NORM_SPEED_HEADER + """\
0,L,D,2,8/2,0.8,NA,"1,3",Empty,NA,0,0,0.0
1,L,D,2,8/2,0.9,NA,"2,2",Empty,NA,0,0,0.0
2,L,D,2,8/2,1.0,NA,DP2,Empty,NA,0,0,0.0
3,L,D,2,8/2,0.5,"0,1","1,3",S,X,2,32,0.6
4,L,D,2,8/2,0.7,"0,1","2,2",S,X,2,32,0.8
5,L,D,2,8/2,0.0,"0,1",DP2,S,X,2,32,0.0
6,L,D,2,8/2,0.0,"0,1","1,3",T,X,2,64,0.0
7,L,D,2,8/2,0.0,"0,1","2,2",T,X,2,64,0.0
8,S,X,1,32,0.6,0,NA,S,X,1,32,0.6
9,S,X,1,32,0.0,0,NA,T,X,1,64,0.0
"""


def shared_file(*parts: str) -> Path:
    """A file of the shared reference data, or skip: it is not part of the project's checkout."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.is_file():
        pytest.skip(f"shared reference data not found at {path} (it lives beside the checkout, "
                    "see shared/data/README.md)")
    return path


@pytest.fixture
def tiny_gavel_path(tmp_path: Path) -> Path:
    path = tmp_path / "tiny_throughputs.json"
    path.write_text(json.dumps(TINY_GAVEL))
    return path


@pytest.fixture
def gavel_path() -> Path:
    return shared_file("gavel", "simulation_throughputs.json")


@pytest.fixture
def norm_speed_path() -> Path:
    return shared_file("blox", "norm_speed.csv")


@pytest.fixture(scope="session")
def gavel_model():
    """Gavel's table read once per session (about 0.1 s, but many tests use it)."""
    from tesserae.profiles.gavel import read_gavel

    return read_gavel(shared_file("gavel", "simulation_throughputs.json"))


@pytest.fixture
def tiny_csv(tmp_path: Path) -> Path:
    """A hand-written norm_speed.csv whose best strategies are easy to check by hand."""
    path = tmp_path / "norm_speed.csv"
    path.write_text(TINY_NORM_SPEED)
    return path
