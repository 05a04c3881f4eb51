"""One way to read a profile's JSON file, so every format names the file and line the same way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tesserae.core.errors import InputError


def read_json_file(path: Path, what: str) -> Any:
    """The parsed document; an unreadable, non-UTF-8 or malformed file is an InputError naming it.

    ``what`` says what the file was meant to be ("profile", "Gavel throughput file").
    """
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror}", path=str(path)) from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"not valid JSON: not UTF-8 text ({exc.reason} at byte {exc.start})",
                         path=str(path)) from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc.msg}", path=str(path), line=exc.lineno) from exc
