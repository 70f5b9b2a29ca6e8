"""A transformers causal LM as a specpar model: weights once per device, servers with their own KV caches (every
server of one model on one device shares one copy of the weights: only the caches multiply)."""

from __future__ import annotations

import copy
import functools
import itertools
import os
from collections.abc import Sequence

from specpar.backends.transformers_server import TransformersServer
from specpar.backends.vocabulary import TokenizedModel
from specpar.core.errors import ConfigError
from specpar.core.latency import LatencyProfile
from specpar.core.numbers import positive_int

_names = itertools.count()
DTYPES = ("float32", "float64", "bfloat16", "float16")


def torch_dtype(dtype):
    """A torch dtype from a name in DTYPES (or a torch dtype, returned as is)."""
    import torch

    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    return getattr(torch, dtype)


def check_device(device: str) -> str:
    """``device`` if torch can use it here ("cpu", "cuda", "cuda:N"), else a ConfigError saying what exists."""
    import torch

    if device == "cpu":
        return device
    if device.startswith("cuda"):
        n = torch.cuda.device_count()
        index = int(device.split(":", 1)[1]) if ":" in device else 0
        if index < n:
            return f"cuda:{index}"
        raise ConfigError(f"device {device!r} is not available: this machine has {n} CUDA device(s)")
    raise ConfigError(f"device must be 'cpu' or 'cuda[:N]', got {device!r}")


def available_devices() -> list[str]:
    """cuda:0..n-1 when torch sees GPUs, else ["cpu"]."""
    import torch

    n = torch.cuda.device_count()
    return [f"cuda:{i}" for i in range(n)] if n else ["cpu"]


class TransformersModel(TokenizedModel):
    """A causal LM with its tokenizer.

    source: a loaded ``PreTrainedModel``, or a local directory / hub id for ``AutoModelForCausalLM``.
    tokenizer: a tokenizer, or None to load one from ``source`` when it is a path or id (ids alone need none).
    device: where the weights live first ("cpu", "cuda:N"); dtype: one of DTYPES (default float32).
    latency: a measured LatencyProfile (from ``specpar profile``), used only by the virtual clock.
    rows: the width of its servers' rows (default: its output layer's; :mod:`specpar.backends.vocabulary`).
    factory: a picklable function returning this model, for Ray actors to build their own copy (set for a model
        loaded from a directory).
    """

    kind = "transformers"
    no_tokenizer = ": give token ids, or pass tokenizer= when building it"

    def __init__(
        self,
        source,
        tokenizer=None,
        *,
        device: str = "cpu",
        dtype=None,
        name: str | None = None,
        latency: LatencyProfile | None = None,
        rows: int | None = None,
        factory=None,
    ):
        import torch

        device = check_device(device)
        self.path = str(source) if isinstance(source, (str, os.PathLike)) else None  # None: a module in memory
        if isinstance(source, (str, os.PathLike)):
            module, tokenizer = _load(str(source), tokenizer, torch_dtype(dtype) or torch.float32)
            name = name or _name(source)
            if factory is None:
                factory = functools.partial(TransformersModel, str(source), dtype=dtype, name=name, latency=latency)
        else:
            module = source
            if dtype is not None:
                module = module.to(torch_dtype(dtype))
        module.eval()
        self._modules = {device: module.to(device)}
        self.device = device
        self.tokenizer = tokenizer
        self.config = module.config
        self.name = name or getattr(self.config, "_name_or_path", None) or f"model{next(_names)}"
        self.latency = latency
        self.factory = factory
        self.native_rows = module.get_output_embeddings().weight.shape[0]
        self.embedding_rows = module.get_input_embeddings().weight.shape[0]  # the ids it can read
        if rows is not None:
            positive_int("rows", rows)
        self.rows = rows or self.native_rows

    # -- facts ---------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """The width of the rows its servers return (its output layer's, or the target's it was fitted to)."""
        return self.rows

    def with_rows(self, rows: int) -> TransformersModel:
        """This model (the same weights, not copied) with servers that return rows of width ``rows``: the output
        layer's rows beyond it dropped (padding: probability 0), missing ones added at probability 0."""
        fitted = copy.copy(self)
        fitted.rows = rows
        if self.factory is not None:
            fitted.factory = functools.partial(_with_rows, self.factory, rows)
        return fitted

    @property
    def generation_config(self):
        """The module's generation config (its eos ids end the text: specpar.core.stopping.end_of_text_ids)."""
        return getattr(self.module_on(self.device), "generation_config", None)

    @property
    def max_token_id(self) -> int:
        """The largest id a prompt may hold (the rows of its input embedding); simulated models take any id."""
        return self.embedding_rows - 1

    @property
    def context_window(self) -> int:
        return int(getattr(self.config, "max_position_embeddings", None) or 1 << 30)

    @property
    def weight_bytes(self) -> int:
        module = self._modules[self.device]
        return sum(p.numel() * p.element_size() for p in module.parameters())

    def backend_settings(self) -> dict:
        """What its servers' speed depends on besides its weights (a machine profile's key)."""
        import torch

        dtype = next(self._modules[self.device].parameters()).dtype
        return {"backend": "transformers", "build": torch.__version__, "dtype": str(dtype), "device": self.device}

    def kv_bytes_per_token(self) -> int:
        """Bytes one cached token costs in one server's KV cache (keys and values, every layer)."""
        c = self.config
        heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        size = next(self._modules[self.device].parameters()).element_size()
        return 2 * c.num_hidden_layers * heads * head_dim * size

    # -- servers -------------------------------------------------------------------------------
    def module_on(self, device: str):
        """The weights on ``device``: one copy per device, made on first use."""
        device = check_device(device)
        if device not in self._modules:
            self._modules[device] = copy.deepcopy(self._modules[self.device]).to(device)
        return self._modules[device]

    def server(self, name: str | None = None, device: str | None = None) -> TransformersServer:
        """A new server (its own empty KV cache) on ``device`` (default: the model's device)."""
        return TransformersServer(self, name or f"{self.name}-{next(_names)}", device or self.device)

    def servers(
        self, n: int, devices: Sequence[str] | None = None, prefix: str = "server", max_tokens: int = 0
    ) -> list[TransformersServer]:
        """``n`` servers spread round-robin over ``devices``, after checking they fit in memory.

        max_tokens: the longest sequence each server will cache (prompt + new tokens), for the KV estimate.
        """
        devices = [check_device(d) for d in (devices or [self.device])]
        placed = [devices[i % len(devices)] for i in range(n)]
        for device in dict.fromkeys(placed):
            check_fits(self, device, placed.count(device), max_tokens)
        return [self.server(f"{prefix}{i}", d) for i, d in enumerate(placed)]

    def __repr__(self) -> str:
        return f"TransformersModel({self.name}, {self.device})"


def _load(source: str, tokenizer, dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        module = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(source)
    except OSError as exc:
        raise ConfigError(
            f"cannot load a model from {source!r}: give a local directory with config.json and weights, "
            f"or a hub id while online ({exc})"
        ) from exc
    except Exception as exc:  # a truncated or corrupt file: safetensors, JSON and transformers raise their own kinds
        raise ConfigError(f"cannot load a model from {source!r}: {type(exc).__name__}: {exc}") from exc
    return module, tokenizer


def available_memory(device: str) -> int:
    """Bytes free on ``device`` now (CPU: MemAvailable)."""
    if device == "cpu":
        try:
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")  # free pages: a lower bound
    import torch

    return torch.cuda.mem_get_info(torch.device(device))[0]


def check_fits(model: TransformersModel, device: str, n_servers: int, max_tokens: int) -> None:
    """Refuse, before allocating anything, ``n_servers`` servers that would not fit on ``device``.

    Needs: one copy of the weights if the device has none yet, plus each server's KV cache
    for ``max_tokens`` tokens.
    """
    weights = 0 if device in model._modules else model.weight_bytes
    kv = n_servers * max_tokens * model.kv_bytes_per_token()
    need, free = weights + kv, available_memory(device)
    if need > free:
        raise ConfigError(
            f"{n_servers} server(s) of {model.name} need about {need / 2**30:.2f} GiB on {device} "
            f"({weights / 2**30:.2f} GiB of weights + {kv / 2**30:.2f} GiB of KV cache for {max_tokens} tokens each) "
            f"but only {free / 2**30:.2f} GiB is free: lower sp_degree or max_tokens, or add devices"
        )


def _with_rows(factory, rows: int) -> TransformersModel:
    return factory().with_rows(rows)


def load_tokenizers(target: str, drafter: str) -> tuple:
    """The tokenizers of two model directories (or hub ids), compared before any weights load: different ones are
    refused (:func:`specpar.backends.vocabulary.check_tokenizers`). None for one that cannot be read here (loading
    the model then says why)."""
    from transformers import AutoTokenizer

    from specpar.backends.vocabulary import check_tokenizers

    tokenizers = []
    for source in (target, drafter):
        try:
            tokenizers.append(AutoTokenizer.from_pretrained(str(source)))
        except Exception:  # no tokenizer files, or no such model: TransformersModel names the problem
            tokenizers.append(None)
    check_tokenizers(*tokenizers, _name(target), _name(drafter))
    return tokenizers[0], tokenizers[1]


def _name(source) -> str:
    return os.path.basename(os.path.normpath(str(source)))
