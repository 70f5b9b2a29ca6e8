"""The machine profile's cache: one file per model pair, backend settings and machine, measured on first need.

A profile is valid for what its key names (:func:`profile_key`): each model's files by a fingerprint (sha256 over
each file's size, first and last MiB), the backend's settings and library version, the machine (CPU model, usable
cores, GPUs), and the measurement (:data:`MEASURE_VERSION`, the options that change its figures and the sample's
fingerprint: ``auto`` and the predictions read the default measurement's, never one made otherwise). Which runtimes'
overheads were measured is not in the key: the profile records them.

The file is ``<cache>/profiles/machine-<sha256 of the key, 16 hex digits>.json``, holding the key beside the profile;
a file whose key differs is measured again, a corrupt one with one warning. A model held only in memory (no file)
has no fingerprint: its profile is measured each time and not kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from specpar.backends.cpu_threads import cpu_cores
from specpar.core.errors import ConfigError, SpecparWarning
from specpar.core.json_output import dumps
from specpar.core.model import as_model

MEASURE_VERSION = 3
"""Raised whenever what :mod:`specpar.prediction.measure_pair` measures, or how, changes: older caches are stale."""
MIB = 1 << 20


def fingerprint(path: str | os.PathLike) -> str:
    """A fast content fingerprint of a file or a directory's files: 16 hex digits."""
    path = Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    digest = hashlib.sha256()
    for f in files:
        size = f.stat().st_size
        digest.update(f"{f.relative_to(path) if path.is_dir() else f.name}\0{size}\0".encode())
        with open(f, "rb") as fh:
            digest.update(fh.read(MIB))
            if size > 2 * MIB:
                fh.seek(size - MIB)
                digest.update(fh.read(MIB))
            elif size > MIB:
                digest.update(fh.read())
    return digest.hexdigest()[:16]


def machine() -> dict:
    """This machine as a profile depends on it: {"cpu": model name, "cores": usable cores, "gpu": [names]}."""
    return {"cpu": _cpu_model(), "cores": cpu_cores(), "gpu": _gpus()}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpus() -> list[str]:
    """NVIDIA GPUs by the driver's own listing (no library imported); empty without a driver."""
    names = []
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        try:
            for line in info.read_text().splitlines():
                if line.startswith("Model:"):
                    names.append(line.split(":", 1)[1].strip())
        except OSError:
            continue
    return names


def model_key(model) -> dict:
    """What a profile depends on of one model: its name, its files' fingerprint (None: held in memory only) and its
    backend settings."""
    model = as_model(model)
    path = model.path
    files = fingerprint(path) if path is not None and Path(path).exists() else None
    return {"name": model.name, "files": files, "settings": model.backend_settings()}


def profile_key(target, drafter, measurement: Mapping) -> dict:
    """The key of a pair's machine profile measured as ``measurement`` says (module docstring;
    :meth:`specpar.prediction.measure_pair.MeasureOptions.measurement`)."""
    return {
        "target": model_key(target),
        "drafter": None if drafter is None else model_key(drafter),
        **machine(),
        "measure": {"version": MEASURE_VERSION, **measurement},
    }


def sample_fingerprint(prompts: Sequence[Sequence[int]]) -> str:
    """16 hex digits of sha256 over the sample prompts' token ids."""
    return hashlib.sha256(json.dumps([list(map(int, p)) for p in prompts]).encode()).hexdigest()[:16]


def cacheable(key: Mapping) -> bool:
    """Whether a profile with this key can be kept: every model in it has files."""
    return all(m is None or m.get("files") is not None for m in (key["target"], key["drafter"]))


def cache_path(key: Mapping, folder: str | os.PathLike | None = None) -> Path:
    """The file of the profile keyed ``key`` (in ``folder``, default ``<cache>/profiles``)."""
    if folder is None:
        from specpar.backends.weights import cache_dir

        folder = cache_dir() / "profiles"
    name = hashlib.sha256(_canonical(key).encode()).hexdigest()[:16]
    return Path(folder) / f"machine-{name}.json"


def read(path: Path, key: Mapping, parse: Callable[[dict], object]):
    """The profile in ``path`` when it exists and was measured for ``key``; None otherwise. A file that cannot be
    read or parsed gets one warning (it is measured again and overwritten)."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ConfigError("not a JSON object")
        if _canonical(data.get("key")) != _canonical(key):
            return None
        return parse(data)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ConfigError, KeyError, TypeError) as exc:
        warnings.warn(
            f"the cached machine profile {str(path)!r} cannot be read ({exc}); measuring it again", SpecparWarning,
            stacklevel=3,
        )  # fmt: skip
        return None


def write(path: str | os.PathLike, data: dict) -> None:
    """Write ``data`` as JSON atomically (a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(dumps(data) + "\n", encoding="utf-8")
    tmp.replace(path)


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def load_or_measure(key: Mapping, measure: Callable[[], dict], parse: Callable[[dict], object],
                    folder: str | os.PathLike | None = None, refresh: bool = False):  # fmt: skip
    """The profile keyed ``key``: from its cache file when valid (and not ``refresh``), else ``measure()`` (a dict
    with "key" set to ``key``), kept in the cache when :func:`cacheable`. ``parse`` makes the profile of a dict."""
    path = cache_path(key, folder)
    if not refresh and cacheable(key):
        found = read(path, key, parse)
        if found is not None:
            return found
    data = measure()
    profile = parse(data)
    if cacheable(key):
        write(path, data)
    return profile


def sample_prompts(model) -> list[list[int]]:
    """:data:`SAMPLE_TEXTS` in ``model``'s tokenizer; a ConfigError for a model without one."""
    if as_model(model).tokenizer is None:
        raise ConfigError(f"{as_model(model).name or model!r} has no tokenizer: give the sample's token ids (prompts=)")
    return [model.encode(text) for text in SAMPLE_TEXTS]


@contextmanager
def steps_shown(total: int, progress: Callable[[str], None] | None = None) -> Iterator[Callable[[str], None]]:
    """The step callback of a measurement: ``progress`` when given, else a bar of ``total`` steps on stderr while
    it runs (when stderr is a terminal: a first-need measurement says what it does), taken down at the end."""
    if progress is not None or not sys.stderr.isatty():
        yield progress or (lambda label: None)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("measuring this machine: {task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), transient=True) as bar:  # fmt: skip
        task = bar.add_task("starting", total=total)
        yield lambda label: bar.update(task, advance=1, description=label)


SAMPLE_TEXTS = (  # the prompts a profile is measured on when the caller gives none: code and prose
    'def running_mean(values: list[float], window: int) -> list[float]:\n    """Return the mean of each run of '
    '`window` consecutive values.\n    >>> running_mean([1, 2, 3, 4], 2)\n    [1.5, 2.5, 3.5]\n    """\n',
    'def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:\n    """Merge overlapping '
    "closed intervals and return them sorted by start.\n    >>> merge_intervals([(1, 3), (2, 6), (8, 10)])\n"
    '    [(1, 6), (8, 10)]\n    """\n',
    'import json\n\n\ndef load_config(path):\n    """Read a JSON configuration file, fill in defaults for missing '
    'keys and\n    check that every value has the expected type.\n    """\n',
)
