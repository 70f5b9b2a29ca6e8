"""The commands' JSON: the one writer (``--json`` objects on stdout and ``-o`` JSON lines) and the one reader of JSON
a user gives (:func:`parse`: a flag's text, a profile's file).

Non-finite floats (nan, inf: e.g. an acceptance rate with nothing drafted) are written as null, so that every
file is standard JSON that any reader parses.
"""

from __future__ import annotations

import json
import math
import sys
from typing import IO, Any


def finite(obj: Any) -> Any:
    """``obj`` with its non-finite floats as None and its tuples as lists (what JSON can hold)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def parse(text: str, what: str) -> Any:
    """``text`` parsed as JSON; a ConfigError naming ``what`` when it is not JSON or is nested too deeply for the
    parser (thousands of levels: Python's recursion limit, a RecursionError traceback otherwise)."""
    from specpar.core.errors import ConfigError

    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{what} is not valid JSON: {exc.msg} (at character {exc.pos})") from None
    except RecursionError:
        raise ConfigError(f"{what} is nested too deeply to read (thousands of levels of arrays or objects)") from None


def dumps(obj: Any, indent: int | None = 2) -> str:
    """``obj`` as standard JSON (nan and inf as null)."""
    return json.dumps(finite(obj), indent=indent, allow_nan=False)


def print_json(obj: Any, file: IO[str] | None = None) -> None:
    """A command's ``--json`` output: one indented object on stdout (or ``file``)."""
    print(dumps(obj), file=file or sys.stdout)


class JsonLines:
    """``with JsonLines(path) as out: out.write(record)``: one compact JSON line per record, flushed as written
    (a run cut short keeps the lines so far). path None: writes nothing."""

    def __init__(self, path: str | None):
        self.path = path
        self._file = None

    def __enter__(self) -> JsonLines:
        if self.path:
            self._file = open(self.path, "w", encoding="utf-8")
        return self

    def write(self, record: Any) -> None:
        if self._file is not None:
            self._file.write(dumps(record, indent=None) + "\n")
            self._file.flush()

    def __exit__(self, *exc) -> bool:
        if self._file is not None:
            self._file.close()
        return False
