"""What every ``tesserae`` command shares: one-line usage errors, readable help, name completion.

- ``TesseraeCommand`` / ``TesseraeGroup`` (the ``cls`` of every command and group) turn click usage
  errors into an InputError, which ``tesserae.cli.main`` prints as one line with exit status 2, and
  fill in ``--help``: the placeholders ``{policies}``, ``{server_policies}``, ``{oracles}`` and
  ``{placements}`` in an option's help become the registered names. A dedicated plug-in flag
  whose own default is "not given" (``--tiresias-thresholds``, ``--promote-knob``,
  ``--skew-threshold``) shows the default the built-in plug-in then takes. An argument shows its
  metavar or its name in capitals, once (``ID...``, not ``ID... <list[str]>``; ``[-- CMD [ARGS]...]``
  in the usage line, not ``[-- CMD [ARGS]...]...``), a repeatable option its element type
  (``--env <str>``). (The Typer apps use click's
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
import re
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


def _plugin_default(name: str) -> str:
    """The default a built-in plug-in gives its option ``name`` (read only when help is shown)."""
    if name == "tiresias_thresholds":
        from tesserae.scheduling._tiresias_queues import DEFAULT_THRESHOLDS

        return ",".join(f"{t:g}" for t in DEFAULT_THRESHOLDS)
    if name == "promote_knob":
        from tesserae.scheduling._tiresias_queues import DEFAULT_PROMOTE_KNOB

        return f"{DEFAULT_PROMOTE_KNOB:g}"
    if name == "skew_threshold":
        from tesserae.placement.tiresias import DEFAULT_SKEW_THRESHOLD

        return f"{DEFAULT_SKEW_THRESHOLD:g}"
    raise KeyError(name)


#: The dedicated flags (by parameter name) that ``_plugin_default`` knows.
PLUGIN_DEFAULTS = ("tiresias_thresholds", "promote_knob", "skew_threshold")
_LIST_TYPE = re.compile(r"<list\[([^\]]+)\]>")


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


def _argument_label(param: Any) -> str:
    return param.metavar or param.name.upper() + ("..." if param.nargs != 1 else "")


def _with_default(text: str, default: str) -> str:
    """Help text with ``default: X`` first in its closing ``[...]`` (as click puts it), or a new one."""
    if text.endswith("]") and "  [" in text:
        head, _, extra = text.rpartition("  [")
        return f"{head}  [default: {default}; {extra}"
    return f"{text}  [default: {default}]"


class TesseraeCommand(_Polished, TyperCommand):
    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                label = _argument_label(param)
                pieces.append(label if param.required else f"[{label}]")
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        args, opts = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            name, text = record
            if param.param_type_name == "argument":
                args.append((_argument_label(param), text))
            else:
                if param.name in PLUGIN_DEFAULTS and param.default is None:
                    text = _with_default(text, _plugin_default(param.name))
                opts.append((_LIST_TYPE.sub(r"<\1>", name), text))
        for title, rows in (("Arguments", args), ("Options", opts)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


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
