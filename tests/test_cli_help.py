"""What a new user reads first: --help, --version, shell completion, and the names the options take."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from tesserae.core.errors import InputError
from tesserae.placement.base import placement_names
from tesserae.scheduling.base import make_policy, policy_names


def tesserae(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The command in this process (help and completion need no fresh interpreter), 80 columns wide."""
    from typer.testing import CliRunner

    from tesserae.cli import app

    result = CliRunner().invoke(app, list(args), prog_name="tesserae", env={"COLUMNS": "80", **(env or {})})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def tesserae_process(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tesserae.cli", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "80"})


COMMANDS = [("simulate",), ("compare",), ("server",), ("submit",), ("jobs",), ("show",), ("logs",), ("cluster",),
            ("cancel",), ("profile",), ("view",), ("plugins",), ("trace", "info"), ("trace", "convert"),
            ("token", "create"), ()]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "tesserae")
def test_help_shows_no_bool_metavar_and_cuts_nothing(command: tuple[str, ...]) -> None:
    r = tesserae(*command, "--help")
    assert r.returncode == 0, r.stderr
    assert "<bool>" not in r.stdout
    assert "…" not in r.stdout, r.stdout  # Rich's panels cut a word wider than its column with an ellipsis
    assert max(len(line) for line in r.stdout.splitlines()) <= 80, r.stdout


def flowed(text: str) -> str:
    """Help text as one line: click wraps at spaces and after hyphens."""
    return " ".join(re.sub(r"-\n\s+", "-", text).split())


def test_run_help_is_whole() -> None:
    out = flowed(tesserae("compare", "--help").stdout)
    assert ("POLICY[(no-backfill)|(plain)][:PLACEMENT] with an optional +packing, e.g. las:tesserae+packing; "
            "repeat.") in out


def test_policy_and_placement_help_list_the_registered_names() -> None:
    for command in ("simulate", "compare", "server"):
        out = flowed(tesserae(command, "--help").stdout)
        assert ", ".join(placement_names()) in out, command
    assert f"(who runs): {', '.join(policy_names())}." in flowed(tesserae("simulate", "--help").stdout)
    server = flowed(tesserae("server", "--help").stdout)
    accepted = policy_names(include_oracles=False)
    assert f"(who runs): {', '.join(accepted)} (the oracles srsf, srtf, themis need" in server
    assert set(policy_names()) - set(accepted) == {"srsf", "srtf", "themis"}


def test_version() -> None:
    r = tesserae_process("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"tesserae {version('tesserae')}"


def test_shell_completion_is_on_and_completes_names(monkeypatch: pytest.MonkeyPatch) -> None:
    top = tesserae("--help").stdout
    assert "--install-completion" in top and "--show-completion" in top
    # --show-completion detects the shell from the parent processes; under make's /bin/sh (dash) or
    # a detached runner that is not a shell Typer supports, so pin bash, the one this test checks.
    import typer.completion

    monkeypatch.setattr(typer.completion, "_get_shell_name", lambda: "bash")
    script = tesserae("--show-completion")
    assert script.returncode == 0 and "_TESSERAE_COMPLETE" in script.stdout

    def complete(words: str) -> list[str]:
        r = tesserae(env={"_TESSERAE_COMPLETE": "complete_bash", "COMP_WORDS": words,
                          "COMP_CWORD": str(len(words.split()) - 1)})
        assert r.returncode == 0, r.stderr
        return r.stdout.split()

    assert complete("tesserae simu") == ["simulate"]
    assert complete("tesserae simulate --policy tir") == ["tiresias-gittins", "tiresias-las"]
    assert "srtf" not in complete("tesserae server --policy s")
    assert complete("tesserae compare --placement tes") == ["tesserae"]


def test_server_lists_only_the_policies_it_accepts() -> None:
    from tesserae.config import RunSpec
    from tesserae.runtime.server import check_policy

    with pytest.raises(InputError) as info:
        check_policy(RunSpec(policy="nosuch"))
    message = str(info.value)
    listed = message.split("the server accepts ")[1].split(", ")
    assert listed == policy_names(include_oracles=False) and "srtf" not in listed and "themis" not in listed
    for name in listed:  # every name it lists, it accepts
        check_policy(RunSpec(policy=name))
        assert not make_policy(name).oracle
    for oracle in ("srtf", "srsf", "themis"):
        with pytest.raises(InputError, match=f"policy '{oracle}' needs the true durations.*the server accepts fifo"):
            check_policy(RunSpec(policy=oracle))


def test_usage_errors_of_simulator_commands_are_one_line() -> None:
    r = tesserae_process("simulate", "--jobs", "many", "--out", "x")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "'--jobs'" in lines[0], r.stderr
    assert "see 'tesserae simulate --help'" in lines[0]
    r = tesserae_process("trace", "info")
    assert r.returncode == 2 and "see 'tesserae trace info --help'" in r.stderr


def _all_commands() -> list[tuple[str, ...]]:
    import typer

    from tesserae.cli import app

    def walk(command: Any, path: tuple[str, ...]) -> list[tuple[str, ...]]:
        # The root's commands are built when looked up (tesserae.cli.COMMANDS): ask the group, not its dict.
        names = command.list_commands(None) if hasattr(command, "list_commands") else []
        return [path, *(p for name in names for p in walk(command.get_command(None, name), (*path, name)))]

    return walk(typer.main.get_command(app), ())


def test_every_usage_line_and_argument_shows_no_type_placeholder() -> None:
    """Issue 30: 'submit [OPTIONS] [-- CMD [ARGS]...]...', 'ID... <list[str]>', '--env <list[str]>'."""
    commands = _all_commands()
    assert ("submit",) in commands and ("hold",) in commands and ("trace", "info") in commands
    for command in commands:
        out = tesserae(*command, "--help").stdout
        usage = out.splitlines()[0]
        assert usage.startswith("Usage: tesserae"), (command, out)
        assert "...]..." not in usage and "{" not in usage and "<" not in usage, (command, usage)
        assert "<list[" not in out, (command, out)
    assert tesserae("submit", "--help").stdout.startswith("Usage: tesserae submit [OPTIONS] [-- CMD [ARGS]...]\n")
    assert tesserae("hold", "--help").stdout.startswith("Usage: tesserae hold [OPTIONS] [ID...]\n")  # or filters
    assert tesserae("trace", "info", "--help").stdout.startswith("Usage: tesserae trace info [OPTIONS] PATH\n")
    assert "--env <str>" in tesserae("submit", "--help").stdout


def test_dedicated_tiresias_flags_show_the_defaults_the_plugins_take() -> None:
    from tesserae.placement.tiresias import DEFAULT_SKEW_THRESHOLD
    from tesserae.scheduling._tiresias_queues import DEFAULT_PROMOTE_KNOB, DEFAULT_THRESHOLDS

    assert (DEFAULT_THRESHOLDS, DEFAULT_PROMOTE_KNOB, DEFAULT_SKEW_THRESHOLD) == ((3600.0,), 0.0, 0.4)
    for command in ("simulate", "compare", "server"):
        out = flowed(tesserae(command, "--help").stdout)
        assert re.search(r"--tiresias-thresholds T1,T2,\.\.\. Tiresias' priority queues .*?\(deprecated\)\. "
                         r"\[default: 3600\]", out), (command, out)
        assert re.search(r"--promote-knob <float range> Tiresias' starvation guard P.*?\(0 = off\)\. "
                         r"\[default: 0; x>=0\.0\]", out), command
        assert re.search(r"--skew-threshold <float> tiresias placement: .*? \[default: 0\.4\]", out), command
        assert "--queues " not in out  # the deprecated name is hidden, only named as the former one


def test_trace_seed_out_and_run_help_say_what_they_do() -> None:
    seed = flowed(tesserae("trace", "info", "--help").stdout)
    assert "--seed <int> Seed that draws the job types a trace does not give: a Philly trace's" in seed
    assert "a Slurm dump's jobs whose name is no job type; the other formats ignore it." in seed
    assert "generated" not in seed
    assert "report.html" in flowed(tesserae("simulate", "--help").stdout).split("--out <path>")[1].split("--")[0]
    compare = flowed(tesserae("compare", "--help").stdout)
    assert "report.html" in compare.split("--out <path>")[1].split("--run")[0]
    run_help = compare.split("--run RUN")[1].split("--trace")[0]
    assert f"POLICY: {', '.join(policy_names())}. PLACEMENT: {', '.join(placement_names())}." in run_help


def test_queues_is_a_deprecated_name_of_tiresias_thresholds(tmp_path: Path) -> None:
    """--queues (Tiresias' thresholds) read as the tenant queues of --queue-config: renamed, still taken."""
    from tesserae.cli_options import parse_queues

    assert parse_queues("500,5000") == (500.0, 5000.0) and parse_queues(None) is None
    with pytest.raises(InputError, match="deprecated name of --tiresias-thresholds: give one"):
        parse_queues("500", "600")
    with pytest.raises(InputError) as e:
        parse_queues("5,1")
    assert e.value.field == "tiresias-thresholds"
    common = ["--jobs", "20", "--cluster", "2x4", "--policy", "tiresias-las", "-q"]
    old = tesserae_process("simulate", "--queues", "500,5000", *common, "--out", str(tmp_path / "old"))
    new = tesserae_process("simulate", "--tiresias-thresholds", "500,5000", *common, "--out", str(tmp_path / "new"))
    assert old.returncode == 0 and new.returncode == 0, old.stderr + new.stderr
    assert "warning: --queues is deprecated: it is --tiresias-thresholds" in old.stderr
    assert "deprecated" not in new.stderr
    assert (tmp_path / "old" / "jobs.csv").read_text() == (tmp_path / "new" / "jobs.csv").read_text()
    assert tesserae_process("simulate", *common, "--out", str(tmp_path / "default")).returncode == 0
    assert (tmp_path / "default" / "jobs.csv").read_text() != (tmp_path / "new" / "jobs.csv").read_text()
