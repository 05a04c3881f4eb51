"""What ``tesserae simulate`` and ``compare`` load (issue 29: start-up decides the speed of a short run).

Each command's module is imported only when that command runs (``tesserae.cli.COMMANDS``), so the
simulator's commands load none of the runtime (its commands, controller, store, API, executors),
the profiler, the web server or their libraries. Checked in a fresh interpreter: ``sys.modules``
after ``import tesserae.cli`` and at the end of a real run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: Libraries of the runtime and the web server (none is needed to simulate).
SERVER_LIBRARIES = ("fastapi", "starlette", "uvicorn", "ray", "sqlite3", "httpx", "multipart")
#: The runtime's one module a simulation uses: the process's start time, read from /proc (its wall seconds).
RUNTIME_ALLOWED = {"tesserae.runtime", "tesserae.runtime.launch", "tesserae.runtime.launch.procs"}
#: The web modules that write a run's HTML report (and nothing that serves it).
WEB_ALLOWED = {"tesserae.web", "tesserae.web.report", "tesserae.web.results", "tesserae.web.templating",
               "tesserae.web.assets"}


def _loaded(code: str, *args: str) -> list[str]:
    """The modules a fresh interpreter holds after ``code`` (with ``args`` as its argv)."""
    script = ("import atexit, json, sys\n"
              "atexit.register(lambda: sys.__stdout__.write('\\nMODULES ' + json.dumps(sorted(sys.modules)) + '\\n'))\n"
              + code)
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("MODULES "))
    return json.loads(line.removeprefix("MODULES "))


def _unneeded(modules: list[str]) -> list[str]:
    return [m for m in modules
            if m.split(".")[0] in SERVER_LIBRARIES
            or (m.startswith("tesserae.runtime") and m not in RUNTIME_ALLOWED)
            or (m.startswith("tesserae.web") and m not in WEB_ALLOWED)
            or m.startswith("tesserae.profiler")]


def test_importing_the_command_loads_no_command_module() -> None:
    modules = _loaded("import tesserae.cli")
    assert not _unneeded(modules)
    assert not [m for m in modules if m.startswith(("tesserae.sim", "tesserae.cli_sim", "tesserae.runtime", "jinja2"))]


@pytest.mark.parametrize("args", [
    ("simulate", "--jobs", "6", "--cluster", "2x2", "--seed", "1"),
    ("compare", "--run", "fifo", "--run", "las", "--jobs", "6", "--cluster", "2x2", "--seed", "1"),
], ids=["simulate", "compare"])
def test_a_simulation_loads_no_runtime_server_or_profiler(args: tuple[str, ...], tmp_path: Path) -> None:
    modules = _loaded("from tesserae.cli import main\nsys.argv[0] = 'tesserae'\nmain()",
                      *args, "--out", str(tmp_path / "out"), "-q")
    assert (tmp_path / "out").is_dir()  # the run did take place
    assert "tesserae.sim.engine" in modules
    assert not _unneeded(modules), _unneeded(modules)


def test_every_command_is_built_from_the_module_named_for_it() -> None:
    """``COMMANDS`` names each command's module; that module adds it, and nothing it adds is left unnamed."""
    from tesserae import cli

    for module in sorted(set(cli.COMMANDS.values())):
        named = {name for name, m in cli.COMMANDS.items() if m == module}
        assert set(cli.module_commands(module)) == named, module
    group = cli.LazyGroup()
    assert group.list_commands(None) == list(cli.COMMANDS)
    for name in cli.COMMANDS:
        assert group.get_command(None, name).name == name
    assert group.get_command(None, "nope") is None


def _main(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    from tesserae.cli import main

    monkeypatch.setattr(sys, "argv", ["tesserae", *args])
    with pytest.raises(SystemExit) as exit_info:
        main()
    return int(exit_info.value.code or 0)


def test_the_collector_is_off_only_while_the_command_starts(monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``main`` keeps the cyclic collector off while it imports and builds the command; the simulation
    itself runs with it on (start-up's objects frozen), and ``main`` leaves it as it found it."""
    import gc

    import tesserae.sim.runner as runner

    seen: list[tuple[bool, int]] = []
    simulate = runner.simulate

    def watched(*a: object, **k: object) -> object:
        seen.append((gc.isenabled(), gc.get_freeze_count()))
        return simulate(*a, **k)

    monkeypatch.setattr(runner, "simulate", watched)
    assert _main(monkeypatch, "simulate", "--jobs", "6", "--cluster", "2x2", "--out", str(tmp_path / "o"), "-q") == 0
    assert len(seen) == 1 and seen[0][0] and seen[0][1] > 0
    assert gc.isenabled() and gc.get_freeze_count() == 0
    for args in (("--help",), ("simulate", "--jobs", "two"), ("nope",)):  # ended before any command ran
        _main(monkeypatch, *args)
        assert gc.isenabled() and gc.get_freeze_count() == 0, args
    gc.disable()
    try:
        _main(monkeypatch, "--help")
        assert not gc.isenabled() and gc.get_freeze_count() == 0
    finally:
        gc.enable()
    capsys.readouterr()
