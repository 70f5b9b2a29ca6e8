"""A GGUF model on llama.cpp as a specpar model: weights mapped once per process, servers with their own caches.

``LlamaModel(path)`` checks the file (:mod:`specpar.backends.llama.gguf_file`), loads it through llama.cpp
(memory-mapped: servers in other processes on the machine share the file's pages) and reads its tokenizer.
``model.server(name)`` makes a :class:`~specpar.backends.llama.server.LlamaServer` with its own context; every
server of one model in a process shares one loaded copy of the weights.
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
import warnings
import weakref
from collections.abc import Sequence

from specpar.backends.llama.context import MAX_OUTPUTS
from specpar.backends.llama.gguf_file import TOKENS, GGUFHeader, read_header
from specpar.backends.llama.library import build_has, lib, recent_errors, system_info
from specpar.backends.llama.server import LlamaServer
from specpar.backends.llama.settings import LlamaSettings, fast_weights_note, model_warnings
from specpar.backends.llama.tokenizer import GGUFTokenizer
from specpar.backends.vocabulary import TokenizedModel
from specpar.core.errors import ConfigError, SpecparWarning
from specpar.core.latency import LatencyProfile

_names = itertools.count()
TREE_SEQS = 64  # sequence ids per server: token trees of up to 64 leaves score in one pass
CELL_PAD = 256  # llama.cpp pads a cache's size to a multiple of 256 cells
# a rough allowance for a context's compute buffers: the default pair's target measured 37.8 MiB with passes of 63
# tokens, 68.5 MiB with passes of 512 (llama.cpp's sched_reserve)
COMPUTE_BYTES, COMPUTE_BYTES_PER_TOKEN = 32 << 20, 128 << 10


class _Weights:
    """A loaded ``llama_model`` (freed when the last model and server using it are gone)."""

    def __init__(self, ptr, path: str):
        self.ptr, self.path = ptr, path

    def __del__(self):
        try:
            lib().llama_model_free(self.ptr)
        except Exception:  # interpreter shutdown
            pass


_loaded: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_load_lock = threading.Lock()


def _load_weights(path: str, repack: bool) -> _Weights:
    """The file's weights, loaded once per process (and per repacking choice)."""
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns, repack)
    with _load_lock:
        weights = _loaded.get(key)
        if weights is None:
            L = lib()
            params = L.llama_model_default_params()
            params.n_gpu_layers = 0
            params.use_mmap = True
            params.use_extra_bufts = repack  # repacking changes the kernel with the batch size
            recent_errors(clear=True)
            ptr = L.llama_model_load_from_file(path.encode(), params)
            if not ptr:
                why = "; ".join(recent_errors(clear=True)) or "llama.cpp gave no reason"
                raise ConfigError(f"llama.cpp cannot load {path!r}: {why}")
            weights = _loaded[key] = _Weights(ptr, path)
    return weights


class LlamaModel(TokenizedModel):
    """A GGUF model (the .gguf file at ``path``) with its tokenizer, run by llama.cpp on the CPU.

    exact: the exact mode (default) or the fast mode (False); settings: how its servers compute (default: the
        mode's, :mod:`specpar.backends.llama.settings`); in the exact mode, settings and weights that break exactness
        are named in a :class:`~specpar.core.errors.SpecparWarning`.
    latency: a measured LatencyProfile (from ``specpar profile``), used only by the virtual clock.
    n_ctx: tokens a server's cache holds by default (default: the context window, at most 4096).
    """

    kind = "llama"
    no_tokenizer = " in its GGUF file: give token ids"
    device = "cpu"

    def __init__(
        self,
        path,
        *,
        name: str | None = None,
        exact: bool | None = None,
        settings: LlamaSettings | None = None,
        latency: LatencyProfile | None = None,
        n_ctx: int | None = None,
    ):
        path = os.fspath(path)
        self.path = path
        self.header = read_header(path)  # a clear refusal for a missing, truncated or foreign file
        L = lib()  # GGML_CPU_TILED_MM is read as llama.cpp loads: the exact mode's pass limit follows it
        self.settings = resolve_settings(exact, settings)
        self.weights = _load_weights(path, self.settings.repack)
        ptr = self.weights.ptr
        vocab = L.llama_model_get_vocab(ptr)
        self.vocab_size = int(L.llama_vocab_n_tokens(vocab))
        self.tokenizer = None  # a GGUF without a tokenizer ("none": ids only) speaks token ids
        if L.llama_vocab_type(vocab) != L.LLAMA_VOCAB_TYPE_NONE:
            template = L.llama_model_chat_template(ptr, None)
            self.tokenizer = GGUFTokenizer(
                ptr,
                template.decode("utf-8", "replace") if template else None,
                self.header.metadata.get("tokenizer.ggml.token_type"),
            )
        self.context_window = int(L.llama_model_n_ctx_train(ptr))
        self.layers = int(L.llama_model_n_layer(ptr))
        self.kv_heads = int(L.llama_model_n_head_kv(ptr))
        self.head_dim = int(L.llama_model_n_embd(ptr)) // max(1, int(L.llama_model_n_head(ptr)))
        self.weight_bytes = int(L.llama_model_size(ptr))
        self.n_ctx = n_ctx or min(self.context_window, 4096)
        self.name = name or os.path.splitext(os.path.basename(path))[0] or f"gguf{next(_names)}"
        self.latency = latency
        self.tree_seqs = TREE_SEQS
        self.factory = functools.partial(LlamaModel, path, name=self.name, settings=self.settings, latency=latency)
        llamafile = build_has("LLAMAFILE")
        self.exactness_warnings = self.settings.warnings() + model_warnings(
            self.header.matrix_types(), llamafile, self.settings.exact
        )
        self.notes = (
            [] if self.settings.exact else [n for n in [fast_weights_note(self.header.matrix_types(), llamafile)] if n]
        )
        for line in self.exactness_warnings:
            warnings.warn(f"{self.name}: not bitwise exact: {line}", SpecparWarning, stacklevel=2)

    # -- facts ---------------------------------------------------------------------------------------------
    @property
    def max_token_id(self) -> int:
        """The largest id a prompt may hold."""
        return self.vocab_size - 1

    @property
    def exact_mode(self) -> bool:
        """The mode its servers run in: True (the exact settings), False (the fast ones)."""
        return self.settings.exact

    @property
    def exact(self) -> bool:
        """Whether its servers' rows are bitwise those of one-token decoding (the exact mode, no exactness warning)."""
        return self.settings.exact and not self.exactness_warnings

    def backend_settings(self) -> dict:
        """What its servers' rows and speed depend on besides the file (a machine profile's key): the backend, its
        library's version and build, the settings with the mode ("exact" or "fast"), and whether rows are exact."""
        build = f"{getattr(lib(), '__version__', '?')}: {system_info()}"
        return {"backend": "llama", "build": build, **self.settings.as_dict(), "exact": self.exact}

    def kv_bytes_per_token(self) -> int:
        """Bytes one cached token costs in one server's cache (f16 keys and values, every layer)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2

    def describe(self) -> str:
        """A few lines for ``-v``: the file, the settings, whether it is exact and why (or why not)."""
        lines = [
            f"{self.name}: {self.header.architecture}, {self.weight_bytes / 2**20:.0f} MiB of weights "
            f"({', '.join(sorted(self.header.matrix_types()))}) from {self.path}",
            self.settings.describe(),
        ]
        if self.exact:
            lines.append(
                "bitwise exact: every row after the prompt equals one-token decoding's, whatever the pass that "
                "computed it"
            )
        lines += [f"NOT exact: {w}" for w in self.exactness_warnings] + self.notes
        return "\n".join(lines)

    # -- servers -------------------------------------------------------------------------------------------
    def server(self, name: str | None = None, device: str | None = None, n_ctx: int | None = None) -> LlamaServer:
        """A new server (its own empty cache of ``n_ctx`` tokens, default the model's)."""
        _check_cpu(device)
        return LlamaServer(self, name or f"{self.name}-{next(_names)}", n_ctx or self.n_ctx)

    def servers(
        self, n: int, devices: Sequence[str] | None = None, prefix: str = "server", max_tokens: int = 0
    ) -> list[LlamaServer]:
        """``n`` servers whose caches hold ``max_tokens`` tokens each (default: n_ctx), checked to fit in memory."""
        for d in devices or ():
            _check_cpu(d)
        n_ctx = self.cache_tokens(max_tokens)
        self.check_fits(n, n_ctx)
        return [self.server(f"{prefix}{i}", n_ctx=n_ctx) for i in range(n)]

    def cache_tokens(self, max_tokens: int) -> int:
        """A server's cache size for sequences of up to ``max_tokens`` (0: the default), in llama.cpp's padding."""
        if not max_tokens:
            return self.n_ctx
        return min(self.context_window, -(-max_tokens // CELL_PAD) * CELL_PAD)

    def check_fits(self, n_servers: int, n_ctx: int) -> None:
        """Refuse, before allocating, servers whose caches and buffers would not fit in the memory available."""
        from specpar.backends.transformers_model import available_memory

        st = self.settings
        outputs = max(min(st.ubatch, MAX_OUTPUTS), self.tree_seqs)
        per_server = (
            n_ctx * self.kv_bytes_per_token()
            + outputs * self.vocab_size * 4
            + COMPUTE_BYTES
            + st.longest_pass * COMPUTE_BYTES_PER_TOKEN
        )
        need, free = n_servers * per_server, available_memory("cpu")
        if need > free:
            raise ConfigError(
                f"{n_servers} llama.cpp server(s) of {self.name} need about {need / 2**30:.2f} GiB for their caches "
                f"of {n_ctx} tokens but only {free / 2**30:.2f} GiB is free: lower sp_degree or max_tokens"
            )

    def __repr__(self) -> str:
        return f"LlamaModel({self.name}, {self.path})"


def _check_cpu(device: str | None) -> None:
    if device not in (None, "cpu"):
        raise ConfigError(f"the llama.cpp backend runs on the CPU here; got device {device!r}")


def resolve_settings(exact: bool | None, settings: LlamaSettings | None) -> LlamaSettings:
    """The settings a model runs in: ``settings``, or the mode's (``exact``: True, the default, or False); a
    ConfigError when the two disagree."""
    if settings is None:
        return LlamaSettings(exact=True if exact is None else exact)
    if not isinstance(settings, LlamaSettings):
        raise ConfigError(f"settings must be a LlamaSettings, got {type(settings).__name__}")
    if exact is not None and exact != settings.exact:
        raise ConfigError(f"exact={exact} but the settings given are the {settings.mode} mode's: give one of the two")
    return settings


def check_same_vocabulary(target: LlamaModel, drafter: LlamaModel) -> None:
    """A drafter must speak the target's vocabulary: same size, same token texts for the same ids."""
    if target.vocab_size != drafter.vocab_size:
        raise ConfigError(
            f"drafter {drafter.name} has {drafter.vocab_size} tokens but target {target.name} has "
            f"{target.vocab_size}: the drafter and target must share one tokenizer"
        )
    if (target.tokenizer is None) != (drafter.tokenizer is None) or (
        target.tokenizer is not None and target.tokenizer.get_vocab() != drafter.tokenizer.get_vocab()
    ):
        raise ConfigError(
            f"the tokenizers of target {target.name} and drafter {drafter.name} differ: speculative inference "
            "needs a drafter with the target's tokenizer (same vocabulary, same ids)"
        )


def check_same_tokenizer_files(target_path, drafter_path) -> None:
    """Refuse a drafter GGUF whose tokenizer is not the target's, from the two files' headers, before any weights
    load (:func:`check_same_vocabulary` checks the loaded models again). Token lists that differ only by ids past
    the shorter one's end (padding rows, as Qwen2.5-0.5B's 151,936 against Qwen2.5-7B's 152,064) are named as such:
    the llama backend has no padded-vocabulary fitting (the transformers backend has)."""
    target, drafter = read_header(target_path, tokens=True), read_header(drafter_path, tokens=True)
    t_tokens, d_tokens = target.metadata.get(TOKENS), drafter.metadata.get(TOKENS)
    t_name, d_name = os.path.basename(os.fspath(target_path)), os.path.basename(os.fspath(drafter_path))
    if t_tokens is None and d_tokens is None:  # tokenless ("none") vocabularies: ids only, compare their counts
        if _id_count(target) == _id_count(drafter):
            return
        raise ConfigError(
            f"drafter {d_name} has {_id_count(drafter)} token ids but target {t_name} has {_id_count(target)}: the "
            "drafter and target must share one tokenizer"
        )
    if t_tokens == d_tokens:
        return
    if t_tokens is not None and d_tokens is not None:
        n = min(len(t_tokens), len(d_tokens))
        if t_tokens[:n] == d_tokens[:n]:
            raise ConfigError(
                f"drafter {d_name} has {len(d_tokens)} token ids and target {t_name} {len(t_tokens)}, the same "
                f"tokens below {n}: their rows differ only by padding, which the llama backend does not fit (use "
                "--backend transformers); the drafter and target must share one tokenizer here"
            )
    raise ConfigError(
        f"the tokenizers of target {t_name} and drafter {d_name} differ (read from their GGUF headers, before loading "
        "any weights): speculative inference needs a drafter with the target's tokenizer (same vocabulary, same "
        "ids); the drafter and target must share one tokenizer"
    )


def _id_count(header: GGUFHeader) -> int | None:
    """A tokenless GGUF's ids: its ``<arch>.vocab_size``, else its embedding's rows."""
    size = header.metadata.get(f"{header.architecture}.vocab_size")
    if size is not None:
        return int(size)
    embedding = header.tensors.get("token_embd.weight")
    return embedding[1][-1] if embedding else None
