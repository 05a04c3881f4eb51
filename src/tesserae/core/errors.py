"""User-facing errors: the CLI prints these as one line, never as a traceback."""

from __future__ import annotations


class InputError(Exception):
    """Bad user input (a trace, a cluster spec, a profile, an option).

    The message names the file, the line and the field where they are known, so that a user can
    fix the input without reading code.
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        where = []
        if path is not None:
            where.append(str(path))
        if line is not None:
            where.append(f"line {line}")
        if field is not None:
            where.append(f"field '{field}'")
        self.path, self.line, self.field, self.message = path, line, field, message
        super().__init__(f"{': '.join([', '.join(where), message]) if where else message}")
