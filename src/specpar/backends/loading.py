"""Loading real models given as paths (or the default pair): :func:`choose_backend` (llama.cpp for GGUF files on the
CPU, else transformers), :func:`load_pair` (tokenizers compared before any weights load), and :class:`LoadConfig`,
an Engine's loading and placement settings. Errors name the settings as the library takes them (``target=``); the
command line says ``--target`` instead (:func:`in_flags`).
"""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, fields

from specpar.core.errors import ConfigError
from specpar.core.model import as_model

log = logging.getLogger(__name__)

BACKENDS = ("llama", "transformers")


def choose_backend(backend: str | None, target=None, drafter=None, devices=None) -> str:
    """The backend that loads models given as paths (or the default pair): ``backend`` when given; else llama for
    GGUF files (and the default pair, which ships as GGUF) on the CPU when llama-cpp-python is installed, else
    transformers."""
    from specpar.backends.llama.library import INSTALL, available

    if backend is not None:
        if backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if backend == "llama" and any(d != "cpu" for d in devices or ()):
            raise ConfigError(f"the llama backend runs on the CPU here; got devices {list(devices)}")
        return backend
    paths = [str(p) for p in (target, drafter) if p is not None]
    gguf = [p.lower().endswith(".gguf") for p in paths]
    if paths and not all(gguf):
        if any(gguf):
            raise ConfigError("give the target and the drafter in one format: both GGUF files or both directories")
        return "transformers"
    on_cpu = all(d == "cpu" for d in devices or ("cpu",)) and (devices is not None or not _cuda_visible())
    if paths and not available():
        raise ConfigError(f"GGUF files run on the llama backend: install it with `{INSTALL}`")
    return "llama" if available() and (paths or on_cpu) else "transformers"


CLI_FLAGS = {"target=": "--target", "drafter=": "--drafter", "dtype=": "--dtype"}  # the errors' names on the CLI


def in_flags(message: str) -> str:
    """A loading error's message with the library's names of the settings replaced by the command line's flags."""
    for name, flag in CLI_FLAGS.items():
        message = message.replace(name, flag)
    return message


GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/kfd")  # CUDA's and ROCm's drivers


def _cuda_visible() -> bool:
    """Whether torch is installed and sees a GPU (then the default pair goes to transformers on it). On Linux without
    a GPU driver's device files the answer is no without importing torch (about 210 MB and 1.7 s of a llama.cpp
    run that never uses it)."""
    import importlib.util

    if sys.platform.startswith("linux") and not any(os.path.exists(f) for f in GPU_DEVICE_FILES):
        return False
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


def load_pair(
    target: str | None = None,
    drafter: str | None = None,
    devices: Sequence[str] = ("cpu",),
    dtype: str | None = None,
    progress: bool = True,
    backend: str | None = None,
    with_drafter: bool = True,
    exact: bool | None = None,
):
    """(target, drafter): the default pair when neither is given, else the two given; LlamaModels (GGUF files on
    llama.cpp) or TransformersModels, as :func:`choose_backend` says; the drafter is loaded on the first of
    ``devices``, the target on the second (default: the same). with_drafter=False (nothing drafts with a model: an
    n-gram proposer alone): (target, None) unless a drafter is given. exact: llama.cpp's exact mode (True, the
    default) or its fast mode (False: :mod:`specpar.backends.llama.settings`); transformers refuses False."""
    from specpar.backends.weights import load_default_pair

    device, target_device = devices[0], devices[1] if len(devices) > 1 else None
    backend = choose_backend(backend, target, drafter, [d for d in (device, target_device) if d])
    check_exact(exact, backend)
    if backend == "llama" and dtype is not None:
        raise ConfigError("dtype= is for the transformers backend: a GGUF file carries its own quantization")
    if backend == "transformers":
        from transformers.utils import logging as transformers_logging

        # transformers' and huggingface_hub's own tqdm bars (one call silences both) would pile up through
        # specpar's progress display on a terminal and be lines of noise in a log: specpar's display is the only one
        transformers_logging.disable_progress_bar()
    alone = not with_drafter and drafter is None
    t0 = time.perf_counter()
    if target is None and drafter is None:
        if not alone and backend == "transformers" and dtype not in (None, "float32"):
            raise ConfigError(
                "the default pair is converted to float32: another dtype= needs a target= and drafter= of your own"
            )
        pair = load_default_pair(device, progress, target_device, backend, with_drafter=not alone, exact=exact)
    elif alone:
        return _load_model(target, backend, target_device or device, dtype, exact), None
    elif target is None or drafter is None:
        raise ConfigError("give both target= and drafter= (or neither, for the default pair)")
    else:
        pair = _load_given(target, drafter, backend, device, target_device, dtype, exact)
    if pair[1] is not None:
        log.info("loaded %s (target) and %s (drafter) on %s in %.1f s", pair[0].name, pair[1].name, backend,
                 time.perf_counter() - t0)  # fmt: skip
        for model in pair if backend == "llama" else ():
            for line in model.describe().splitlines():
                log.info("%s", line)
    return pair


def _load_model(path, backend: str, device: str, dtype, exact, tokenizer=None):
    """One model from ``path`` on ``backend`` (the llama backend: on the CPU)."""
    if backend == "llama":
        from specpar.backends.llama.model import LlamaModel

        return LlamaModel(path, exact=exact)
    from specpar.backends.transformers_model import TransformersModel

    return TransformersModel(path, tokenizer, device=device, dtype=dtype)


def _load_given(target, drafter, backend: str, device: str, target_device, dtype, exact):
    """(target, drafter) from their paths, their tokenizers compared before any weights load."""
    from specpar.backends.vocabulary import fit_drafter

    if backend == "llama":
        from specpar.backends.llama.model import check_same_tokenizer_files, check_same_vocabulary

        check_same_tokenizer_files(target, drafter)  # from the headers
        t, d = _load_model(target, backend, device, None, exact), _load_model(drafter, backend, device, None, exact)
        check_same_vocabulary(t, d)
        return t, d
    from specpar.backends.transformers_model import load_tokenizers

    target_tokenizer, drafter_tokenizer = load_tokenizers(target, drafter)
    t = _load_model(target, backend, target_device or device, dtype, exact, target_tokenizer)
    return t, fit_drafter(t, _load_model(drafter, backend, device, dtype, exact, drafter_tokenizer))


def check_exact(exact, backend: str) -> None:
    """Refuse an ``exact`` that is not True, False or None, and the fast mode on a backend that has none."""
    if exact is not None and not isinstance(exact, bool):
        raise ConfigError(f"exact must be True, False or None (the default: True), got {exact!r}")
    if exact is False and backend != "llama":
        raise ConfigError(
            f"exact=False (--no-exact) is llama.cpp's fast mode; the {backend} backend computes one way: drop it, or "
            "run GGUF files with --backend llama"
        )


def context_window_of(path) -> int | None:
    """The context window of the model at ``path`` read before it loads: a GGUF file's ``<arch>.context_length``,
    a transformers directory's ``max_position_embeddings`` (or ``n_positions``); None when it does not say (or
    cannot be read: loading then names the problem)."""
    import json
    from pathlib import Path

    path = Path(path)
    try:
        if path.is_file() and path.suffix.lower() == ".gguf":
            from specpar.backends.llama.gguf_file import read_header

            header = read_header(path)
            value = header.metadata.get(f"{header.architecture}.context_length")
        else:
            config = json.loads((path / "config.json").read_text())
            value = config.get("max_position_embeddings") or config.get("n_positions")
    except (OSError, ValueError, ConfigError, AttributeError):
        return None
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


@dataclass(frozen=True, kw_only=True)
class LoadConfig:
    """How an :class:`~specpar.Engine` loads models given as paths (or the default pair) and places their servers.

    backend: "llama" (GGUF files on llama.cpp, CPU) or "transformers"; default: :func:`choose_backend`'s.
    devices: the drafter's servers on the first, the target's round-robin over the others (one device: all on it);
        default: where the models are. dtype: the transformers weights' type (default float32).
    max_model_len: the longest sequence a real model's server holds (prompt + output), for the memory check (vLLM's
        name; ``max_tokens`` is its deprecated alias).
    exact: llama.cpp's exact mode (True, the default) or its fast mode (False); models given loaded must run in it.
    """

    backend: str | None = None
    devices: tuple[str, ...] | None = None
    dtype: str | None = None
    max_model_len: int = 4096
    exact: bool | None = None

    @classmethod
    def take(cls, options: dict) -> LoadConfig:
        """The config named by ``options``' keywords for it, taken out of ``options``."""
        if "max_tokens" in options:
            warnings.warn("Engine(max_tokens=) is deprecated: give max_model_len=", DeprecationWarning, stacklevel=3)
            options.setdefault("max_model_len", options.pop("max_tokens"))
        fields = {name: options.pop(name) for name in LOAD_FIELDS if name in options}
        if fields.get("devices") is not None:
            fields["devices"] = tuple(fields["devices"])
        return cls(**fields)

    def load(self, target, drafter):
        """(target, drafter) loaded from their paths (the default pair for None and None) on :func:`choose_backend`'s
        backend: the drafter on the first device, the target on the second where there are two."""
        backend = choose_backend(self.backend, target, drafter, self.devices)
        if backend == "llama":
            devices = list(self.devices or ["cpu"])
        else:
            from specpar.backends.transformers_model import available_devices

            devices = list(self.devices) if self.devices else available_devices()
        return load_pair(target, drafter, devices[:2], self.dtype, backend=backend, exact=self.exact)

    def check_mode(self, target, drafters) -> None:
        """Refuse models (loaded here or given; ``drafters``: a list) that do not run in the mode ``exact`` asks."""
        exact = self.exact
        if exact is None:
            return
        check_exact(exact, "llama")
        for model in [as_model(m) for m in (target, *drafters) if m is not None]:
            mode = model.exact_mode
            if mode != exact and (mode is not None or exact is False):
                runs = (
                    "has no fast mode (llama.cpp's)"
                    if mode is None
                    else f"runs in the {'exact' if mode else 'fast'} mode"
                )
                raise ConfigError(
                    f"exact={exact} but {model.name or repr(model)} {runs}: load the models with exact={exact}"
                )

    def placement(self, target, drafter) -> tuple[list[str], list[str]]:
        """(the target's devices, the drafter's): ``devices``, else where the models are (the drafter's device
        first, then the target's; "cpu" for simulated models)."""
        devices = list(self.devices or ())
        if not devices:
            first = drafter if drafter is not None else target
            devices = list(dict.fromkeys(m.device or "cpu" for m in (first, target)))
        return (devices[1:] if len(devices) > 1 else devices), devices[:1]


LOAD_FIELDS = tuple(f.name for f in fields(LoadConfig))
