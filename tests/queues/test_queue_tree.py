"""The queue tree and its file: validation errors name the file, the line and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from tesserae.core.errors import InputError
from tesserae.core.queues import build_tree, derived_config, parse_config
from tesserae.queue_file import load_queue_tree

CLUSTER = {"v100": 32}
GOOD = """\
default_queue: interns
queues:
  - name: research
    guarantee: 24
    borrow_limit: 4
    weight: 2
  - name: vision
    parent: research
    guarantee: 16
    policy: las
    users: [alice]
  - name: nlp
    parent: research
  - name: interns
    guarantee: 0
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "queues.yaml"
    p.write_text(text)
    return p


def test_good_file_builds_the_tree(tmp_path: Path) -> None:
    tree = load_queue_tree(write(tmp_path, GOOD), CLUSTER)
    assert tree.names == ("research", "vision", "nlp", "interns")
    assert [tree.names[n] for n in tree.leaves] == ["vision", "nlp", "interns"]
    assert tree.guarantee.tolist() == [24, 16, 0, 0]
    assert tree.limit[0] == 28 and tree.limit[1] == float("inf")
    assert tree.path(1) == ["research", "vision"]
    assert tree.names[tree.leaves[tree.leaf_of(user="alice")]] == "vision"
    assert tree.names[tree.leaves[tree.leaf_of(user="zoe")]] == "interns"  # default queue
    assert tree.names[tree.leaves[tree.leaf_of(queue="nlp")]] == "nlp"
    assert tree.may_use("alice", tree.leaf_of(queue="vision"))
    assert not tree.may_use("bob", tree.leaf_of(queue="vision"))
    assert tree.may_use("bob", tree.leaf_of(queue="nlp"))  # nobody listed on its path: open


@pytest.mark.parametrize(("text", "line", "field", "words"), [
    (GOOD.replace("    weight: 2\n", "    weight: 2\n    colour: red\n"), 7, "queues[0].colour", "unknown key"),
    (GOOD.replace("parent: research\n    guarantee: 16", "parent: reserch\n    guarantee: 16"), 8,
     "queues[1].parent", "unknown parent 'reserch'"),
    (GOOD.replace("guarantee: 24", "guarantee: 40"), 4, "queues[0].guarantee", "cluster has 32"),
    (GOOD.replace("guarantee: 24", "guarantee: 8"), 4, "queues[0].guarantee", "sub-queues guarantee 16"),
    (GOOD.replace("  - name: research\n", "  - name: research\n    parent: vision\n"), 4, "queues[0].parent",
     "cycle"),
    (GOOD.replace("weight: 2", "weight: -1"), 6, "queues[0].weight", "greater than 0"),
    (GOOD.replace("default_queue: interns", "default_queue: research"), 1, "default_queue", "sub-queues"),
    (GOOD.replace("  - name: nlp\n", "  - name: vision\n"), 12, "queues[2].name", "defined twice"),
    (GOOD.replace("guarantee: 16", "guarantee: {a100: 8}"), 9, "queues[1].guarantee", "'a100' is not in the cluster"),
    # Issue 27: YAML/JSON booleans are not numbers (before: `weight: true` was stored as 1).
    (GOOD.replace("weight: 2", "weight: true"), 6, "queues[0].weight", "expected a number, got true"),
    (GOOD.replace("guarantee: 24", "guarantee: true"), 4, "queues[0].guarantee", "expected a number, got true"),
    (GOOD.replace("guarantee: 16", "guarantee: {a100: false}"), 9, "queues[1].guarantee",
     "expected a number, got false"),
    (GOOD.replace("borrow_limit: 4", "borrow_limit: false"), 5, "queues[0].borrow_limit",
     "expected a number, got false"),
    ("queues: [\n", 2, None, "not valid YAML"),
    ("pools: []\n", 1, "pools", "unknown key 'pools'"),
])
def test_bad_files_name_line_and_field(tmp_path: Path, text: str, line: int, field: str | None, words: str) -> None:
    p = write(tmp_path, text)
    with pytest.raises(InputError) as e:
        load_queue_tree(p, CLUSTER)
    assert words in str(e.value)
    assert e.value.path == str(p)
    assert e.value.line == line, str(e.value)
    assert e.value.field == field


def test_jobs_naming_unknown_or_inner_queues_are_refused() -> None:
    tree = build_tree(parse_config({"queues": [{"name": "a", "guarantee": 2}, {"name": "b", "parent": "a"}]}),
                      gpus_by_type=CLUSTER)
    with pytest.raises(InputError, match="unknown queue 'x'"):
        tree.leaf_of(queue="x")
    with pytest.raises(InputError, match="has sub-queues"):
        tree.leaf_of(queue="a")
    with pytest.raises(InputError, match="no queue for user 'u'"):
        tree.leaf_of(user="u")


def test_per_type_guarantees_are_checked_per_type() -> None:
    cfg = parse_config({"queues": [{"name": "a", "guarantee": {"a100": 8, "v100": 4}},
                                   {"name": "b", "guarantee": {"a100": 1}}]})
    with pytest.raises(InputError, match="9 a100 GPUs but the cluster has 8"):
        build_tree(cfg, gpus_by_type={"a100": 8, "v100": 8})
    tree = build_tree(cfg, gpus_by_type={"a100": 9, "v100": 8})
    assert tree.guarantee.tolist() == [12, 1]
    assert dict(tree.guarantee_by_type[0]) == {"a100": 8, "v100": 4}


def test_derived_guarantees_follow_gpu_time_and_sum_to_the_cluster() -> None:
    cfg = derived_config({"vc1": 600.0, "vc2": 300.0, "vc3": 100.0, "": 0.0}, 64)
    tree = build_tree(cfg, gpus_by_type={"v100": 64})
    g = dict(zip(tree.names, tree.guarantee.tolist(), strict=True))
    assert g == {"default": 0, "vc1": 38, "vc2": 19, "vc3": 7}  # 38.4, 19.2, 6.4: one more to the largest remainder
    assert sum(g.values()) == 64
    assert tree.default_queue == "default"


def test_the_readme_example_is_a_valid_config(tmp_path: Path) -> None:
    import re

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    text = re.search(r"```yaml\n(# queues.yaml\n.*?)```", readme, re.S).group(1)  # type: ignore[union-attr]
    tree = load_queue_tree(write(tmp_path, text), {"a100": 16, "v100": 48})
    assert [tree.names[n] for n in tree.leaves] == ["vision", "nlp", "interns"]
    assert tree.guarantee.tolist() == [48, 32, 16, 0]
    assert tree.names[tree.leaves[tree.leaf_of(user="zoe")]] == "interns"


def test_large_and_deep_trees_are_bounded() -> None:
    n = 10_000  # a cycle through every queue is found in linear time, and named
    ring = parse_config({"queues": [{"name": f"q{i}", "parent": f"q{(i + 1) % n}"} for i in range(n)]})
    with pytest.raises(InputError, match="'q0' is in a cycle of parents \\(q0 -> q1 -> q2"):
        build_tree(ring)
    chain = parse_config({"queues": [{"name": f"q{i}", "parent": f"q{i + 1}" if i < 39 else None}
                                     for i in range(40)]})
    with pytest.raises(InputError, match="17 levels deep; at most 16"):
        build_tree(chain)
