"""The settings a llama.cpp server runs in: the exact mode (the default) and the fast mode.

**Exact mode.** A row a server returns for a position after the request's prompt does not depend on how many rows
were computed in the same pass, where the position sat in the batch, or how that part of the cache was filled (one
batch, chunks, one token at a time). Then a verification pass returns the very rows of the target's own one-token
greedy decoding, and every algorithm's output is the target's. The prompt itself (all but its last token) is
prefilled in the largest passes, in a shape that is a pure function of the prompt, the same on every server
(:mod:`specpar.backends.llama.prefill`): replicas, catch-ups and later servers hold the same cache. On llama.cpp's
CPU backend these settings make it so, each for a reason found in ggml's kernels and measured on the default pair
(docs/llama_cpp.md):

==================  ===========  ==============================================================================
setting             exact value  what another value changes
==================  ===========  ==============================================================================
flash_attn          True         without it, attention is two matmuls that llamafile's kernels tile by batch size
repack              False        repacked Q4_K weights go through a gemv kernel for 1 row and a gemm kernel for 4+
ubatch              <= 7         passes of 8+ rows take ggml's tiled K-quant matmul (on by default), which sums
                                 otherwise; with ``GGML_CPU_TILED_MM=0`` <= 63: passes of 64+ query rows take the
                                 tiled flash attention
threads             1            one-token passes split attention over the cache between threads (cache > 256)
batch_threads       any          passes of 2+ tokens give each row to one thread: any count is exact
prefill_ubatch      any          the prompt's passes: any size, the same shape on every server
==================  ===========  ==============================================================================

Weights of a float type (F32, F16, BF16) go through llamafile's tinyBLAS from 2 rows up when the library was
built with it (the PyPI build is): those models are exact only with a library built with
``CMAKE_ARGS="-DGGML_LLAMAFILE=OFF"`` (:func:`model_warnings`). Quantized weights (K-quants, Q8_0, Q5_0, Q4_0)
are exact in either build.

**Fast mode** (``exact=False``): llama.cpp's own fastest settings, as ``llama-completion`` runs: repacked weights,
passes of 512 tokens, the tiled kernels, every pass on all the cores it is given. Rows then depend on the pass
that computed them: speculation stays lossless in distribution (up to floating-point rounding), but greedy outputs
may differ from the exact mode's (and between algorithms) where the two best tokens nearly tie.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from specpar.core.errors import ConfigError
from specpar.core.numbers import is_int

EXACT_PASS_TILED = 7  # ggml's tiled K-quant matmul takes passes of 8+ rows (tiled.cpp, ggml_tiled_min_batch)
EXACT_PASS_UNTILED = 63  # flash attention switches to its tiled kernel at GGML_FA_TILE_Q = 64 query rows
FAST_UBATCH = 512  # llama.cpp's default n_ubatch
PREFILL_UBATCH = 512  # the prompt's passes in the exact mode (llama.cpp's default n_ubatch)
SPLIT_ATTENTION_FROM = 257  # one-token passes split attention over the cache once it spans 512 cells (256 padded)
FLOAT_WEIGHTS = ("F32", "F16", "BF16")
AMX = "AMX_INT8"  # the build's feature (llama_print_system_info) that makes repacking take ggml's AMX kernels
_INTS = ("threads", "batch_threads", "ubatch", "prefill_ubatch")


def exact_pass_limit(tiled_mm: bool) -> int:
    """The most tokens an exact pass after the prompt may hold, with ggml's tiled K-quant matmul on or off."""
    return EXACT_PASS_TILED if tiled_mm else EXACT_PASS_UNTILED


@dataclass(frozen=True)
class LlamaSettings:
    """How a llama.cpp server computes. Fields left None take the mode's value (the module docstring's tables).

    exact: True for the exact mode, False for the fast mode.
    threads: CPU threads of a one-token pass (a decode step, a drafter step); exact: 1; fast: all cores.
    batch_threads: CPU threads of a pass over 2+ tokens (prefill, catch-up, verification); all cores (exact at any
        count; an Engine gives its servers the cores free for each request).
    flash_attn: llama.cpp's flash attention (its own default, ``auto``, turns it on for a model on the CPU).
    repack: let llama.cpp repack weights for its gemm kernels (``use_extra_bufts``); exact: False; fast: True, but
        False in a build for a CPU with AMX, where the extra buffers route the weights through ggml's AMX kernels,
        which fault (a general protection fault in ``ldtilecfg``) on the machines this was measured on.
    ubatch: the most tokens one forward pass computes after the prompt (llama.cpp's n_ubatch); exact: 7 (63 with
        GGML_CPU_TILED_MM=0); fast: 512.
    prefill_ubatch: the most tokens of one pass over the prompt in the exact mode (its passes start at multiples of
        it, so their shape is a function of the prompt alone); the fast mode prefills in passes of ``ubatch``.
    tiled_mm: whether ggml's tiled K-quant matmul is on in this process (read from GGML_CPU_TILED_MM, as ggml
        reads it, once; it is not a choice per model).
    """

    exact: bool = True
    threads: int | None = None
    batch_threads: int | None = None
    flash_attn: bool = True
    repack: bool | None = None
    ubatch: int | None = None
    prefill_ubatch: int = PREFILL_UBATCH
    tiled_mm: bool | None = None

    def __post_init__(self):
        from specpar.backends.cpu_threads import cpu_cores
        from specpar.backends.llama.library import build_has, tiled_mm_on

        if not isinstance(self.exact, bool):
            raise ConfigError(f"llama.cpp setting exact must be True or False, got {self.exact!r}")
        tiled = tiled_mm_on() if self.tiled_mm is None else bool(self.tiled_mm)
        cores = cpu_cores()
        mode = (
            {"threads": 1, "batch_threads": cores, "repack": False, "ubatch": exact_pass_limit(tiled)}
            if self.exact
            else {"threads": cores, "batch_threads": cores, "repack": not build_has(AMX), "ubatch": FAST_UBATCH}
        )
        object.__setattr__(self, "tiled_mm", tiled)
        for name, value in mode.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        for name in _INTS:
            value = getattr(self, name)
            if not is_int(value, 1):
                raise ConfigError(f"llama.cpp setting {name} must be an integer >= 1, got {value!r}")

    @classmethod
    def fast(cls, **overrides) -> LlamaSettings:
        """The fast mode's settings (llama.cpp's fastest, all cores), with ``overrides``."""
        return cls(exact=False, **overrides)

    @property
    def mode(self) -> str:
        return "exact" if self.exact else "fast"

    @property
    def pass_limit(self) -> int:
        """The most tokens of an exact pass in this process (7 with the tiled matmul on, else 63)."""
        return exact_pass_limit(self.tiled_mm)

    @property
    def longest_pass(self) -> int:
        """The most tokens of one forward pass (a context's n_ubatch): the prompt's passes count in the exact mode."""
        return max(self.ubatch, self.prefill_ubatch if self.exact else 0)

    def as_dict(self) -> dict:
        """Everything that changes a server's rows or costs, with the mode: a cache key for measured costs."""
        return {"mode": self.mode, **{k: v for k, v in asdict(self).items() if k != "exact"}}

    def warnings(self) -> list[str]:
        """In the exact mode, one sentence per setting that breaks exactness, naming what breaks (empty: exact).
        The fast mode asks for none of it: its describe() says what it gives up."""
        if not self.exact:
            return []
        out = []
        if not self.flash_attn:
            out.append(
                "flash_attn=False: attention runs as matmuls whose kernels depend on the batch size, so verification "
                "rows differ from one-token decoding (use flash_attn=True)"
            )
        if self.repack:
            out.append(
                "repack=True: repacked weights use one kernel for a single row and another for 4+ rows, so "
                "verification rows differ from one-token decoding (use repack=False)"
            )
        limit = self.pass_limit
        if self.ubatch > limit:
            kernel = (
                "ggml's tiled K-quant matmul (GGML_CPU_TILED_MM is on)"
                if self.tiled_mm
                else "the tiled flash attention"
            )
            out.append(
                f"ubatch={self.ubatch}: passes of {limit + 1}+ tokens take {kernel}, so a long catch-up or "
                f"verification gives rows other than one-token decoding (use ubatch <= {limit})"
            )
        if self.threads > 1:
            out.append(
                f"threads={self.threads}: a one-token pass splits attention over the cache between threads once it "
                f"holds {SPLIT_ATTENTION_FROM}+ tokens, so decoding differs from verification on long contexts (use "
                "threads=1; batch_threads may be any number)"
            )
        return out

    def describe(self) -> str:
        """One line for ``-v``: the mode and the settings as llama.cpp gets them."""
        common = f"flash attention {'on' if self.flash_attn else 'off'}, repacking {'on' if self.repack else 'off'}"
        tiled = f"ggml's tiled matmul {'on' if self.tiled_mm else 'off'}"
        if not self.exact:
            from specpar.backends.llama.library import build_has

            why = " (this build's AMX kernels, which repacking would take, fault here)" if build_has(AMX) else ""
            return (
                f"llama.cpp, fast mode (llama.cpp's own fastest settings; not bitwise exact: speculation stays "
                f"lossless in distribution, greedy outputs may differ from the exact mode's at near ties): {common}"
                f"{why if not self.repack else ''}, {tiled}, passes of up to {self.ubatch} tokens, {self.threads} "
                f"thread(s) per one-token pass, {self.batch_threads} per batch"
            )
        return (
            f"llama.cpp, exact mode: {common}, {tiled}, the prompt in passes of up to {self.prefill_ubatch} tokens "
            f"(the same shape on every server), passes of at most {self.ubatch} tokens after it, {self.threads} "
            f"thread(s) per one-token pass, {self.batch_threads} per batch"
        )


def model_warnings(weight_types: set[str], llamafile: bool, exact: bool = True) -> list[str]:
    """Sentences on what of a model's weights breaks exactness in this build (empty: nothing; the fast mode gives
    up exactness anyway: :func:`fast_weights_note` says what its float weights run on).

    weight_types: the GGML type names of the model's matrices (2-D weights); llamafile: the build has LLAMAFILE.
    """
    floats = sorted(set(weight_types) & set(FLOAT_WEIGHTS))
    if not (floats and llamafile and exact):
        return []
    return [
        f"weights in {', '.join(floats)} with a llama.cpp built with llamafile: its tinyBLAS kernels multiply 2+ "
        "rows in another order than one row, so verification rows differ from one-token decoding (rebuild with "
        'CMAKE_ARGS="-DGGML_LLAMAFILE=OFF" pip install --no-binary llama-cpp-python --force-reinstall '
        "llama-cpp-python, or use a quantized GGUF)"
    ]


def fast_weights_note(weight_types: set[str], llamafile: bool) -> str | None:
    """What the fast mode means for a model's float weights in this build (None: no float matrices)."""
    floats = sorted(set(weight_types) & set(FLOAT_WEIGHTS))
    if not floats:
        return None
    if llamafile:
        return (
            f"fast mode with weights in {', '.join(floats)}: they go through llamafile's tinyBLAS kernels (this build "
            "has them), the fastest here; rows depend on the batch size, as everywhere in the fast mode"
        )
    return (
        f"fast mode with weights in {', '.join(floats)}: this build has no llamafile, so they go through ggml's own "
        "kernels (slower than a build with llamafile's tinyBLAS, which the PyPI build has)"
    )
