"""llama.cpp, loaded once per process through llama-cpp-python's ctypes bindings, in its exact settings.

``lib()`` returns the ``llama_cpp`` module after what must happen before the first forward pass of the process:
``GGML_CPU_TILED_MM`` read as ggml reads it (once, unset means on: its tiled K-quant matmul sums passes of 8+ rows in
another order, so the exact mode's passes after the prompt hold at most 7 tokens while it is on, 63 when off:
:mod:`specpar.backends.llama.settings`); llama.cpp's log sent to the ``specpar.llama`` logger, its last error lines
kept for refusals (:func:`recent_errors`); ``llama_backend_init()``. ctypes releases the GIL during every C call.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import threading

from specpar.core.errors import ConfigError

INSTALL = "pip install 'specpar[llama]'"
log = logging.getLogger("specpar.llama")

_lock = threading.Lock()
_lib = None
_errors: collections.deque[str] = collections.deque(maxlen=8)
_callback = None  # the C callback object: kept alive as long as llama.cpp may call it
TILED_MM = "GGML_CPU_TILED_MM"
LOG_ERROR, LOG_CONT = 4, 5  # ggml_log_level (ggml.h): an error line, and the continuation of the line before
_tiled: bool | None = None  # GGML_CPU_TILED_MM as ggml reads it, recorded when llama.cpp is loaded


def available() -> bool:
    """Whether llama-cpp-python is installed (without loading it)."""
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


def lib():
    """The ``llama_cpp`` bindings, initialised for exact use (see the module docstring); a ConfigError saying how to
    install them when they are missing."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            _lib = _load()
    return _lib


def _load():
    global _callback, _tiled
    _tiled = _tiled_from(os.environ.get(TILED_MM))
    try:
        import llama_cpp
    except ImportError as exc:
        raise ConfigError(
            f"the llama.cpp backend needs llama-cpp-python: install it with `{INSTALL}` (built from source, about 4 "
            f"minutes on 2 cores), or choose --backend transformers ({exc})"
        ) from exc

    last = [0]

    def on_log(level, text, _data):
        if level != LOG_CONT:
            last[0] = level
        line = (text or b"").decode("utf-8", "replace").rstrip()
        if line:
            if last[0] == LOG_ERROR:
                _errors.append(line)
            log.debug("%s", line)

    _callback = llama_cpp.llama_log_callback(on_log)
    llama_cpp.llama_log_set(_callback, None)
    llama_cpp.llama_backend_init()
    return llama_cpp


def _tiled_from(value: str | None) -> bool:
    """GGML_CPU_TILED_MM read as ggml reads it: unset, or an integer other than 0 (atoi), is on."""
    if value is None:
        return True
    number = re.match(r"\s*[+-]?\d*", value).group().strip()
    return number not in ("", "+", "-") and int(number) != 0


def tiled_mm_on() -> bool:
    """Whether ggml's tiled K-quant matmul is on in this process: GGML_CPU_TILED_MM when llama.cpp was loaded (ggml
    reads it once), or now if it is not loaded yet."""
    return _tiled if _tiled is not None else _tiled_from(os.environ.get(TILED_MM))


def recent_errors(clear: bool = False) -> list[str]:
    """llama.cpp's last error lines (at most 8), oldest first; ``clear``: forget them after reading."""
    out = list(_errors)
    if clear:
        _errors.clear()
    return out


def system_info() -> str:
    """llama.cpp's one-line account of its build: SIMD features, LLAMAFILE, OPENMP, REPACK."""
    return lib().llama_print_system_info().decode("utf-8", "replace").strip()


def build_has(feature: str) -> bool:
    """Whether llama.cpp's build reports ``feature = 1`` (e.g. "LLAMAFILE")."""
    return f"{feature} = 1" in system_info()
