"""The plug-in surface shared by scheduling policies and placements: registries, typed options.

A plug-in is a class registered under the name the CLI and config files use. It declares its
options as a pydantic model (``Options``: every field typed, with a default) and builds itself
from validated options and the run's shared settings (``RunContext``) in ``from_options``.
Options reach it by name only: a key the plug-in does not declare is refused with an error
that names the plug-in and the key (``parse_options``), never dropped.

Built-in plug-ins register when their package is imported; out-of-tree ones are found through
Python entry points (``tesserae.policies``, ``tesserae.placements``): a package of a user's own
declares ``NAME = "module:Class"`` in one of those groups, and the registry loads the class the
first time the name is asked for.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from tesserae.core.errors import InputError


class PluginOptions(BaseModel):
    """Base of every plug-in's ``Options``: unknown keys refused, values frozen once validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def label_marks(self) -> list[str]:
        """Short marks a run's label carries for these options (an ablation, say); none by default."""
        return []


class NoOptions(PluginOptions):
    """The options of a plug-in that takes none."""


def _split_commas(value: Any) -> Any:
    """``'3250,7200'`` (how a command line gives a list) as a tuple; other values unchanged."""
    if isinstance(value, str):
        return tuple(x.strip() for x in value.split(",") if x.strip())
    return value


#: A list of numbers an option takes: a sequence, or ``'a,b,c'`` from a command line.
FloatList = Annotated[tuple[float, ...], BeforeValidator(_split_commas)]


@dataclass(frozen=True, slots=True)
class RunContext:
    """Settings of the run a plug-in may read but does not own (the run spec sets them)."""

    round_seconds: float = 300.0
    restart_overhead: float = 30.0
    #: Whether this plug-in is asked to let jobs share GPUs (``--packing``).
    packing: bool = False


def option_names(options: type[BaseModel]) -> list[str]:
    return list(options.model_fields)


def declared(options: type[BaseModel], values: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``values`` that ``options`` declares (shared settings given to many plug-ins)."""
    fields = options.model_fields
    return {k: v for k, v in values.items() if k in fields}


def parse_options(kind: str, name: str, options: type[BaseModel], values: Mapping[str, Any]) -> BaseModel:
    """Validated options of plug-in ``name``; InputError naming the plug-in and the key otherwise."""
    fields = options.model_fields
    for key in values:
        if key not in fields:
            takes = f"its options: {', '.join(fields)}" if fields else "it takes none"
            raise InputError(f"{kind} '{name}' has no option '{key}' ({takes})")
    try:
        return options.model_validate(dict(values))
    except ValidationError as e:
        first = e.errors()[0]
        key = str(first["loc"][0]) if first["loc"] else "options"
        raise InputError(f"{kind} '{name}', option '{key}': {first['msg']} (got {first.get('input')!r})") from None


P = TypeVar("P")


class Registry(Generic[P]):
    """Plug-ins of one kind by name: the built-in package's modules, then entry points."""

    def __init__(self, kind: str, group: str, base: type[P], builtin: str,
                 skip: Callable[[str], bool] = lambda m: m.startswith("_") or m == "base") -> None:
        self.kind, self.group, self.base, self.builtin = kind, group, base, builtin
        self._skip = skip
        self._classes: dict[str, type[P]] = {}
        self._builtin_names: set[str] = set()
        self._loaded = False
        self._entries: dict[str, EntryPoint] | None = None

    def register(self, name: str) -> Callable[[type[P]], type[P]]:
        """Class decorator of a built-in plug-in (or one registered by hand)."""

        def wrap(cls: type[P]) -> type[P]:
            cls.name = name  # type: ignore[attr-defined]
            self._classes[name] = cls
            return cls

        return wrap

    def _load_builtin(self) -> None:
        if self._loaded:
            return
        pkg = importlib.import_module(self.builtin)
        for mod in pkgutil.iter_modules(pkg.__path__):
            if not self._skip(mod.name):
                importlib.import_module(f"{self.builtin}.{mod.name}")
        self._builtin_names = set(self._classes)
        self._loaded = True

    def entries(self) -> dict[str, EntryPoint]:
        """Out-of-tree plug-ins by name (not loaded yet); one that takes a built-in name is refused."""
        if self._entries is None:
            self._load_builtin()
            found: dict[str, EntryPoint] = {}
            for ep in sorted(entry_points(group=self.group), key=lambda e: (e.name, e.value)):
                if ep.name in self._builtin_names or ep.name in found:
                    raise InputError(f"{self.kind} '{ep.name}' of entry point '{ep.value}' ({_dist(ep)}) takes "
                                     f"a name already in use; rename it in that package's '{self.group}' "
                                     "entry points", field=self.kind)
                found[ep.name] = ep
            self._entries = found
        return self._entries

    def names(self) -> list[str]:
        self._load_builtin()
        return sorted({*self._classes, *self.entries()})

    def source(self, name: str) -> str:
        """Where a plug-in comes from: 'built-in', or its entry point and distribution."""
        self._load_builtin()
        if name in self._builtin_names:
            return "built-in"
        ep = self.entries().get(name)
        return f"{ep.value} ({_dist(ep)})" if ep is not None else "registered by hand"

    def get(self, name: str) -> type[P]:
        """The class of a plug-in; InputError naming the choices when there is none of that name."""
        self._load_builtin()
        cls = self._classes.get(name)
        if cls is not None:
            return cls
        ep = self.entries().get(name)
        if ep is None:
            raise InputError(f"unknown {self.kind} '{name}'; choose one of: {', '.join(self.names())}",
                             field=self.kind)
        try:
            loaded = ep.load()
        except Exception as e:  # the user's package: any failure is theirs to fix, said in one line
            raise InputError(f"{self.kind} '{name}' from entry point '{ep.value}' ({_dist(ep)}) could not be "
                             f"loaded: {type(e).__name__}: {e}", field=self.kind) from None
        if not (isinstance(loaded, type) and issubclass(loaded, self.base)):
            raise InputError(f"{self.kind} '{name}': entry point '{ep.value}' ({_dist(ep)}) is not a subclass of "
                             f"{self.base.__module__}.{self.base.__qualname__}", field=self.kind)
        return self.register(name)(loaded)


def _dist(ep: EntryPoint) -> str:
    dist = ep.dist
    return f"distribution {dist.name} {dist.version}" if dist is not None else "no distribution"
