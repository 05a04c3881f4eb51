"""The package's layout holds (issue 26): no import circle anywhere in ``tesserae``, the runtime never
imports the web front end, and every SQL statement is in ``runtime/store/``.

Read from the source's own imports (``ast``), lazy imports inside functions included.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import rustworkx as rx

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "tesserae"
SQL = re.compile(r"\b(SELECT\s.+\sFROM|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|"
                 r"CREATE\s+(TABLE|(UNIQUE\s+)?INDEX))\b", re.IGNORECASE | re.DOTALL)


def _module(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(*packages: str) -> dict[str, Path]:
    return {_module(p): p for pkg in packages for p in (PACKAGE / pkg).rglob("*.py")}


def _imports(path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``path`` imports (``from a import b`` names module ``a.b`` if it is one)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                     for a in node.names]
        out.update(n for n in names if n in known)
    return out


def test_no_import_circle_anywhere_in_the_package() -> None:
    modules = _modules(".")
    graph: rx.PyDiGraph = rx.PyDiGraph()
    index = {name: graph.add_node(name) for name in modules}
    for name, path in modules.items():
        for dep in _imports(path, set(modules)):
            if dep != name and not name.startswith(dep + "."):  # a package's own modules do not import it back
                graph.add_edge(index[name], index[dep], None)
    circles = [[graph[i] for i in c] for c in rx.simple_cycles(graph)]
    assert circles == [], f"import circles: {circles[:5]}"


def test_the_runtime_never_imports_the_web_front_end() -> None:
    web = set(_modules("web"))
    offenders = {name: sorted(_imports(path, web)) for name, path in _modules("runtime").items()}
    assert {n: d for n, d in offenders.items() if d} == {}


def test_no_sql_outside_the_store() -> None:
    store = PACKAGE / "runtime" / "store"
    found = []
    for path in PACKAGE.rglob("*.py"):
        if store in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.search(node.value):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert found == []
    assert any(SQL.search(p.read_text()) for p in store.glob("*.py"))  # the pattern does find SQL where it is
