"""The plug-in surface: typed options per policy and placement, the generic CLI flags and their
sugar, the optional capabilities as protocols, and out-of-tree plug-ins through entry points
(the worked example in ``examples/plugin``, installed into a temporary folder and run by the CLI)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from tesserae.config import RunSpec, build_scheduler, parse_run_label, policy_maker, with_options
from tesserae.core.cluster import parse_cluster_spec
from tesserae.core.errors import InputError
from tesserae.core.jobs import JobTable
from tesserae.core.throughput import ThroughputModel
from tesserae.placement.base import BulkAdmitter, BulkKeeper, Replayable, make_placement
from tesserae.profiles.default_model import DefaultModel, DefaultModelConfig
from tesserae.scheduling.base import QueueInspect, make_policy
from tesserae.sim.runner import simulate
from tesserae.traces import generate_workload

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "plugin"


def tesserae(*args: str, path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "120"}
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "tesserae.cli", *args], capture_output=True, text=True,
                          timeout=300, env=env)


def one_line_error(r: subprocess.CompletedProcess[str], *words: str) -> None:
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr, r.stderr


# ----------------------------------------------------------------------------- typed options
def test_options_are_validated_against_the_plugin() -> None:
    p = make_policy("tiresias-gittins", {"queues": "100,2000", "promote_knob": "1.5", "gittins_index": "paper",
                                         "gittins_quantum": "50", "gittins_min_samples": "3"})
    assert p.num_queues == 3 and p.promote_knob == 1.5 and p.index_form == "paper" and p.quantum == 50.0
    with pytest.raises(InputError, match="policy 'fifo' has no option 'queues' \\(it takes none\\)"):
        make_policy("fifo", {"queues": "1"})
    with pytest.raises(InputError, match="policy 'tiresias-gittins', option 'gittins_index'"):
        make_policy("tiresias-gittins", {"gittins_index": "nope"})
    with pytest.raises(InputError, match="policy 'gavel-maxmin', option 'gavel_lp'"):
        make_policy("gavel-maxmin", {"gavel_lp": "vertex"})
    t = make_placement("tesserae", {"pack_threshold": "0.3", "type_matching": "false"})
    assert t.pack_threshold == 0.3 and not t.type_matching and not t.hetero
    with pytest.raises(InputError, match="placement 'first-fit' has no option 'pack_threshold'"):
        make_placement("first-fit", {"pack_threshold": "0.3"})


def test_pack_threshold_is_the_packing_threshold() -> None:
    """DESIGN's packing threshold, settable: no pair gains more than 1, so a threshold of 1 packs nothing."""
    cluster, model = parse_cluster_spec("2x4"), DefaultModel()
    specs = generate_workload(60, 2.0, cluster, model, seed=3)
    pairs = {}
    for threshold in (None, 1.0):
        run = RunSpec(policy="las", placement="tesserae", packing=True,
                      placement_options={} if threshold is None else {"pack_threshold": threshold})
        assert build_scheduler(cluster, model, run).placement.pack_threshold == (threshold or 0.1)
        _, s = simulate(specs, cluster, model, run)
        pairs[threshold] = s["packed_pairs_per_round_mean"]
    assert pairs[None] > 0 and pairs[1.0] == 0


def test_dedicated_flags_are_sugar_for_the_same_options() -> None:
    shared = {"queues": (3250.0, 7200.0), "promote_knob": 2.0, "gittins_prior": None}
    las = with_options(RunSpec(policy="tiresias-las"), shared_policy=shared)
    assert las.policy_options == {"queues": (3250.0, 7200.0), "promote_knob": 2.0}
    explicit = with_options(RunSpec(policy="tiresias-las"), policy={"queues": (3250.0, 7200.0), "promote_knob": 2.0})
    assert las.policy_options == explicit.policy_options
    # A policy a tenant queue names gets the flags it declares, even under a main policy that takes none.
    assert policy_maker(with_options(RunSpec(), shared_policy=shared))("tiresias-las").num_queues == 3
    # A shared flag skips a policy that does not take it (one compare mixes both kinds) ...
    assert with_options(RunSpec(policy="fifo"), shared_policy=shared).policy_options == {}
    # ... a generic option does not, and NAME.KEY goes to that policy's runs alone.
    with pytest.raises(InputError, match="policy 'fifo' has no option 'queues'"):
        build_scheduler(parse_cluster_spec("1x4"), DefaultModel(), with_options(RunSpec(), policy={"queues": "1"}))
    scoped = {"tiresias-las.promote_knob": "4"}
    assert with_options(RunSpec(policy="tiresias-las"), policy=scoped).policy_options == {"promote_knob": "4"}
    assert with_options(RunSpec(policy="fifo"), policy=scoped).policy_options == {}
    with pytest.raises(InputError, match="no policy is named 'nosuch'"):
        with_options(RunSpec(), policy={"nosuch.key": "1"})
    # The explicit option wins over the flag.
    both = with_options(RunSpec(policy="tiresias-las"), policy={"promote_knob": "1"}, shared_policy=shared)
    assert both.policy_options["promote_knob"] == "1"
    # Labels keep the placement's ablation marks, from its validated options.
    run = with_options(parse_run_label("fifo:tesserae", RunSpec()), placement={"strategy_choice": "no"})
    assert run.label == "fifo:tesserae[fixed-strategy]"


def test_cli_option_errors_are_one_line_naming_plugin_and_key(tmp_path: Path) -> None:
    base = ["simulate", "--jobs", "5", "--cluster", "1x4", "-q", "--out", str(tmp_path)]
    one_line_error(tesserae(*base, "--policy", "las", "--policy-opt", "queues=1"), "policy 'las'", "'queues'")
    one_line_error(tesserae(*base, "--policy", "tiresias-las", "--policy-opt", "promote_knob=fast"),
                   "policy 'tiresias-las'", "option 'promote_knob'")
    one_line_error(tesserae(*base, "--placement", "tesserae", "--placement-opt", "pack_threshold"),
                   "'pack_threshold' is not KEY=VALUE")
    one_line_error(tesserae(*base, "--placement", "consolidated", "--placement-opt", "skew_threshold=0.2"),
                   "placement 'consolidated'", "'skew_threshold'")


def test_compare_gives_the_sugar_to_the_runs_that_take_it(tmp_path: Path) -> None:
    r = tesserae("compare", "--run", "fifo", "--run", "tiresias-las:tesserae+packing",
                 "--tiresias-thresholds", "500,5000",
                 "--placement-opt", "tesserae.pack_threshold=0.5", "--jobs", "30", "--cluster", "2x4", "-q",
                 "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    las = json.loads((tmp_path / "tiresias-las_tesserae_packing" / "summary.json").read_text())
    assert las["queue_thresholds"] == [500.0, 5000.0]


# ----------------------------------------------------------------------------- capabilities
def test_capabilities_are_protocols() -> None:
    model = DefaultModel()
    one, two = parse_cluster_spec("1x4"), parse_cluster_spec("1x4:k80,1x4:v100")
    table = JobTable([])
    tess = make_placement("tesserae")
    assert isinstance(tess, Replayable) and not isinstance(make_placement("gavel"), Replayable)
    assert isinstance(tess.begin(one, table, {}, model), BulkAdmitter)
    multi = tess.begin(two, table, {}, model)
    assert isinstance(multi, BulkKeeper) and not isinstance(multi, BulkAdmitter)
    assert isinstance(make_placement("consolidated").begin(one, table, {}, model), BulkKeeper)
    ff = make_placement("first-fit")
    ff_one, ff_two = ff.begin(one, table, {}, model), ff.begin(two, table, {}, model)
    assert isinstance(ff_one, BulkKeeper) and isinstance(ff_one, BulkAdmitter)
    assert isinstance(ff_two, BulkKeeper) and not isinstance(ff_two, BulkAdmitter)
    assert not isinstance(make_placement("yarn").begin(one, table, {}, model), BulkKeeper)
    assert isinstance(make_policy("tiresias-las"), QueueInspect) and not isinstance(make_policy("las"), QueueInspect)


def test_pair_fits_has_a_default_in_the_protocol() -> None:
    class Flat(ThroughputModel):
        name, measured, reference_gpu_type = "flat", False, "v100"

    assert Flat().pair_fits("a", "b", "v100", 1, 1)
    small = DefaultModel(DefaultModelConfig(gpu_memory_gb={"v100": 16.0}, memory_gb={"a": 10.0, "b": 5.0}))
    assert small.pair_fits("a", "b", "v100", 1, 1) and not small.pair_fits("a", "a", "v100", 1, 1)
    assert isinstance(small, ThroughputModel)


# ----------------------------------------------------------------------------- entry points
def _install_example(target: Path) -> str:
    """The example package installed into ``target`` (put on PYTHONPATH): with pip where a setuptools that
    builds wheels is at hand, else as pip would lay it out (package and dist-info with its entry points)."""
    src = target.parent / "src-copy"
    shutil.copytree(EXAMPLE, src)  # the build writes its scratch files next to the sources
    spec = importlib.util.find_spec("setuptools")
    if spec is not None:
        import setuptools

        if tuple(int(x) for x in setuptools.__version__.split(".")[:2]) >= (70, 1):
            r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                                "--no-index", "--quiet", "--target", str(target), str(src)],
                               capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, r.stderr
            return "pip"
    meta = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    shutil.copytree(src / "src" / "tesserae_example_plugin", target / "tesserae_example_plugin")
    info = target / f"tesserae_example_plugin-{meta['version']}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {meta['version']}\n")
    groups = meta["entry-points"]
    (info / "entry_points.txt").write_text("".join(
        f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n" for g, eps in groups.items()))
    return "dist-info"


def test_example_plugin_installs_and_runs_through_the_cli(tmp_path: Path) -> None:
    target = tmp_path / "site"
    _install_example(target)
    r = tesserae("plugins", "--json", path=target)
    assert r.returncode == 0, r.stderr
    found = json.loads(r.stdout)
    pol = {p["name"]: p for p in found["policies"]}["smallest-first"]
    pla = {p["name"]: p for p in found["placements"]}["worst-fit"]
    assert "tesserae-example-plugin 0.1.0" in pol["source"] and [o["name"] for o in pla["options"]] == ["max_nodes"]
    out = tmp_path / "run"
    r = tesserae("simulate", "--policy", "smallest-first", "--policy-opt", "starvation_seconds=1800",
                 "--placement", "worst-fit", "--placement-opt", "max_nodes=2", "--jobs", "40", "--load", "1.5",
                 "--cluster", "4x4", "-q", "--out", str(out), path=target)
    assert r.returncode == 0, r.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["policy"] == "smallest-first" and s["placement"] == "worst-fit" and s["completed"] == 40
    assert s["starvation_seconds"] == 1800.0
    one_line_error(tesserae("simulate", "--policy", "smallest-first", "--policy-opt", "starvation_seconds=-1",
                            "--jobs", "5", "-q", "--out", str(out), path=target),
                   "policy 'smallest-first', option 'starvation_seconds'")
    # Without the package on the path the names are unknown, and said so.
    one_line_error(tesserae("simulate", "--policy", "smallest-first", "--jobs", "5", "-q", "--out", str(out)),
                   "unknown policy 'smallest-first'")


def _dist(target: Path, name: str, entry_points: str) -> None:
    info = target / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)


def test_broken_or_clashing_entry_points_are_one_line_errors(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    _dist(broken, "broken", "[tesserae.policies]\nghost = no_such_module:Policy\n")
    one_line_error(tesserae("simulate", "--policy", "ghost", "--jobs", "5", "-q", "--out", str(tmp_path / "o"),
                            path=broken), "policy 'ghost'", "distribution broken 1.0", "ModuleNotFoundError")
    wrong = tmp_path / "wrong"
    _dist(wrong, "wrong", "[tesserae.placements]\nnumpy-array = numpy:ndarray\n")
    one_line_error(tesserae("simulate", "--placement", "numpy-array", "--jobs", "5", "-q", "--out",
                            str(tmp_path / "o"), path=wrong), "is not a subclass of", "PlacementPolicy")
    clash = tmp_path / "clash"
    _dist(clash, "clash", "[tesserae.policies]\nfifo = numpy:ndarray\n")
    one_line_error(tesserae("simulate", "--jobs", "5", "-q", "--out", str(tmp_path / "o"), path=clash),
                   "policy 'fifo'", "distribution clash 1.0", "name already in use")


def test_order_of_the_example_policy() -> None:
    """The worked example is a real policy: smallest gang first, a starved job ahead of all."""
    sys.path.insert(0, str(EXAMPLE / "src"))
    try:
        from tesserae_example_plugin.smallest_first import SmallestFirst
    finally:
        sys.path.remove(str(EXAMPLE / "src"))
    from tesserae.core.jobs import JobSpec

    t = JobTable([JobSpec(0, 0.0, 4, "resnet50", 100.0), JobSpec(1, 10.0, 1, "resnet50", 100.0),
                  JobSpec(2, 20.0, 2, "resnet50", 100.0)])
    rows = np.arange(3)
    assert SmallestFirst().order(t, rows, 100.0).tolist() == [1, 2, 0]
    assert SmallestFirst(starvation_seconds=95.0).order(t, rows, 100.0).tolist() == [0, 1, 2]
