"""Files a command reads or writes, checked up front: a user's path mistake is one ConfigError, never a traceback.

Every command that writes calls :func:`check_output_file` or :func:`check_output_dir` on its paths *before* it
starts working, so an hour of profiling is never lost at the last step to a missing directory. Every input file
is read with :func:`read_text`, which names what is wrong with it (missing, a directory, unreadable, binary).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from specpar.core.errors import ConfigError

DEFAULT_IMAGE_SUFFIX = ".png"


def image_suffixes() -> tuple[str, ...]:
    """File extensions matplotlib can save a figure as (".png", ".pdf", ".svg", ...)."""
    from matplotlib.backend_bases import FigureCanvasBase

    others = sorted("." + s for s in FigureCanvasBase.get_supported_filetypes() if "." + s != DEFAULT_IMAGE_SUFFIX)
    return (DEFAULT_IMAGE_SUFFIX, *others)


def _nearest_existing(path: Path) -> Path:
    """``path`` or its closest existing ancestor."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _check_directory(directory: Path, option: str, shown: str) -> None:
    """``directory`` (an existing path) is a directory this process may create files in."""
    if not directory.is_dir():
        raise ConfigError(f"{option} {shown!r}: {str(directory)!r} is a file, not a directory")
    try:  # a file made and removed at once: permissions, read-only file systems and /proc all answer truly
        with tempfile.TemporaryFile(dir=directory, prefix=".specpar-probe-"):
            pass
    except OSError as exc:
        raise ConfigError(
            f"{option} {shown!r}: cannot write in directory {str(directory)!r} ({exc.strerror or exc})"
        ) from None


def check_output_file(path: str | os.PathLike, option: str, suffixes: tuple[str, ...] | None = None) -> str:
    """The path a command will write its output file to, checked before any work starts.

    option: the flag that named it (for the message, e.g. "-o").
    suffixes: the extensions allowed (e.g. :func:`image_suffixes`); a path without one gets the first.
    Refuses (ConfigError): a directory, a path in a directory that does not exist or is a file, a directory or an
    existing file this process cannot write, an extension not in ``suffixes``. Returns the path as it will be
    written (with the default extension added where there was none).
    """
    shown = str(path)
    if not shown:
        raise ConfigError(f"{option}: give a file name")
    p = Path(path)
    if shown.endswith(os.sep) or p.is_dir():
        raise ConfigError(f"{option} {shown!r} is a directory: give a file name")
    if suffixes is not None:
        suffix = p.suffix.lower()
        if not suffix:
            p, shown = p.with_name(p.name + suffixes[0]), shown + suffixes[0]
        elif suffix not in suffixes:
            raise ConfigError(
                f"{option} {shown!r}: unknown file extension {p.suffix!r}; use one of {', '.join(suffixes)}"
            )
    parent = p.parent
    if not parent.exists():
        existing = _nearest_existing(parent)
        if not existing.is_dir():
            raise ConfigError(f"{option} {shown!r}: {str(existing)!r} is a file, not a directory")
        raise ConfigError(f"{option} {shown!r}: directory {str(parent)!r} does not exist")
    _check_directory(parent, option, shown)
    if p.exists() and not os.access(p, os.W_OK):
        raise ConfigError(f"{option} {shown!r}: the file exists and cannot be overwritten (permission denied)")
    return shown


def check_output_dir(path: str | os.PathLike, option: str) -> str:
    """A directory a command will write files into (created if missing), checked before any work starts."""
    shown = str(path)
    if not shown:
        raise ConfigError(f"{option}: give a directory")
    p = Path(path)
    if p.exists():
        _check_directory(p, option, shown)
    else:
        _check_directory(_nearest_existing(p), option, shown)
    return shown


def read_text(path: str | os.PathLike, what: str) -> str:
    """The text of an input file (UTF-8), or a ConfigError naming ``what`` it is and why it cannot be read."""
    shown = str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{what} {shown!r} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {shown!r} is a directory, not a file") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {shown!r}: {exc.strerror or exc}") from None
    bad = data.find(b"\0")
    if bad < 0:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad = exc.start
    raise ConfigError(f"{what} {shown!r} is not a text file (a binary byte at offset {bad})")
