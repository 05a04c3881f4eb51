"""What a new user reads first: --help, --version, shell completion, and the names the options take."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import version

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
