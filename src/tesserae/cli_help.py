"""What every ``tesserae`` command shares: one-line usage errors, readable help, name completion.

- ``TesseraeCommand`` / ``TesseraeGroup`` (the ``cls`` of every command and group) turn click usage
  errors into an InputError, which ``tesserae.cli.main`` prints as one line with exit status 2, and
  fill in ``--help``: the placeholders ``{policies}``, ``{server_policies}``, ``{oracles}`` and
  ``{placements}`` in an option's help become the registered names. (The Typer apps use click's
  plain help layout, ``rich_markup_mode=None``: it wraps every line at any terminal width and
  shows flags without a ``<bool>`` type, where Rich's panels cut words off once a command has
  many options.)
  The names are filled in only when help is shown: loading every policy module costs about half a
  second, which ``tesserae jobs`` should not pay.
- ``PolicyOpt``, ``ServerPolicyOpt``, ``PlacementOpt``: the options that take those names, with
  shell completion of them (``tesserae --install-completion``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from tesserae.core.errors import InputError


def policy_names(*, include_oracles: bool = True) -> list[str]:
    from tesserae.scheduling.base import policy_names as names

    return names(include_oracles=include_oracles)


def placement_names() -> list[str]:
    from tesserae.placement.base import placement_names as names

    return names()


_NAME_LISTS: dict[str, Callable[[], list[str]]] = {
    "{policies}": policy_names,
    "{server_policies}": lambda: policy_names(include_oracles=False),
    "{oracles}": lambda: sorted(set(policy_names()) - set(policy_names(include_oracles=False))),
    "{placements}": placement_names,
}


def _is_usage_error(e: BaseException) -> bool:
    # Typer vendors click in recent versions and uses click itself in older ones: match by class name.
    return any(c.__name__ == "UsageError" for c in type(e).__mro__) and hasattr(e, "format_message")


class _Polished:
    """Mixin of TesseraeCommand and TesseraeGroup (see the module docstring)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)  # type: ignore[misc]
        except Exception as e:
            if _is_usage_error(e):
                raise _one_line(ctx, e) from None
            raise

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)  # type: ignore[misc]
        except Exception as e:  # values are converted (and refused) here too
            if _is_usage_error(e):
                raise _one_line(ctx, e) from None
            raise

    def format_help(self, ctx: Any, formatter: Any) -> None:
        if self.help:  # type: ignore[attr-defined]
            # Rich help keeps the single line breaks of a docstring's later paragraphs: re-flow them.
            paragraphs = inspect.cleandoc(self.help).split("\n\n")  # type: ignore[attr-defined]
            self.help = "\n\n".join(" ".join(p.split()) for p in paragraphs)  # type: ignore[attr-defined]
        for param in self.get_params(ctx):  # type: ignore[attr-defined]
            for token, names in _NAME_LISTS.items():
                if param.help and token in param.help:
                    param.help = param.help.replace(token, ", ".join(names()))
        super().format_help(ctx, formatter)  # type: ignore[misc]


def _one_line(ctx: Any, e: Any) -> InputError:
    return InputError(f"{' '.join(e.format_message().split())} (see '{ctx.command_path} --help')")


class TesseraeCommand(_Polished, TyperCommand):
    pass


class TesseraeGroup(_Polished, TyperGroup):
    pass


def _completer(names: Callable[[], list[str]]) -> Callable[[str], list[str]]:
    def complete(incomplete: str) -> list[str]:
        return [n for n in names() if n.startswith(incomplete)]

    return complete


complete_policy = _completer(policy_names)
complete_placement = _completer(placement_names)

PolicyOpt = Annotated[str, typer.Option("--policy", help="Scheduling policy (who runs): {policies}.",
                                        autocompletion=complete_policy)]
ServerPolicyOpt = Annotated[str, typer.Option(
    "--policy", help="Scheduling policy (who runs): {server_policies} (the oracles {oracles} need true job "
    "durations: simulator only).", autocompletion=_completer(lambda: policy_names(include_oracles=False)))]
PlacementOpt = Annotated[str, typer.Option("--placement", help="Placement policy (where): {placements}.",
                                           autocompletion=complete_placement)]


def version_text() -> str:
    try:
        return f"tesserae {package_version('tesserae')}"
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "tesserae (not installed; version unknown)"


def _print_version(value: bool) -> None:
    if value:
        print(version_text())
        raise typer.Exit()


VersionOpt = Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                          help="Print the version and exit.")]
