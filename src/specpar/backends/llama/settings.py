"""The settings a llama.cpp server runs in, and which of them keep its rows bitwise exact.

Exact means: the logits row a server returns for a position do not depend on how many rows were computed in
the same pass, where the position sat in the batch, or how the prefix reached the cache (one batch, chunks, or
one token at a time). Then a verification pass returns the very rows of the target's own one-token greedy
decoding, and every algorithm's output is the target's. On llama.cpp's CPU backend these settings make it so,
each for a reason found in ggml's kernels and measured on the default pair (docs/llama_cpp.md):

================  ==========  ===============================================================================
setting           exact value  what another value changes
================  ==========  ===============================================================================
flash_attn        True        without it, attention is two matmuls that llamafile's kernels tile by batch size
repack            False       repacked Q4_K weights go through a gemv kernel for 1 row and a gemm kernel for 4+
ubatch            <= 63       a pass of 64+ query rows takes ggml's tiled flash attention, which sums otherwise
threads           1           one-token passes split attention over the cache between threads (cache > 256)
batch_threads     any         passes of 2+ tokens give each row to one thread: any count is exact
GGML_CPU_TILED_MM 0           (environment) the tiled K-quant matmul, taken from 8 rows up, sums otherwise
================  ==========  ===============================================================================

Weights of a float type (F32, F16, BF16) go through llamafile's tinyBLAS from 2 rows up when the library was
built with it (the PyPI build is): those models are exact only with a library built with
``CMAKE_ARGS="-DGGML_LLAMAFILE=OFF"`` (:func:`model_warnings`). Quantized weights (K-quants, Q8_0, Q5_0, Q4_0)
are exact in either build.
"""

from __future__ import annotations

from dataclasses import dataclass

from specpar.core.errors import ConfigError
from specpar.core.numbers import is_int

MAX_EXACT_UBATCH = 63  # ggml's flash attention switches to its tiled kernel at GGML_FA_TILE_Q = 64 query rows
SPLIT_ATTENTION_FROM = 257  # one-token passes split attention over the cache once it spans 512 cells (256 padded)
FLOAT_WEIGHTS = ("F32", "F16", "BF16")


@dataclass(frozen=True)
class LlamaSettings:
    """How a llama.cpp server computes (defaults: the exact settings of the table in the module docstring).

    threads: CPU threads of a one-token pass (a decode step, a drafter step).
    batch_threads: CPU threads of a pass over 2+ tokens (prefill, catch-up, verification); exact at any count.
    flash_attn: llama.cpp's flash attention.
    repack: let llama.cpp repack weights for its gemm kernels (``use_extra_bufts``).
    ubatch: the most tokens one forward pass computes (llama.cpp's n_ubatch; longer inputs run in passes of it).
    """

    threads: int = 1
    batch_threads: int = 1
    flash_attn: bool = True
    repack: bool = False
    ubatch: int = MAX_EXACT_UBATCH

    def __post_init__(self):
        for name in ("threads", "batch_threads", "ubatch"):
            value = getattr(self, name)
            if not is_int(value, 1):
                raise ConfigError(f"llama.cpp setting {name} must be an integer >= 1, got {value!r}")

    def warnings(self, tiled_mm: str | None = None) -> list[str]:
        """One sentence per setting that breaks exactness, naming what breaks (empty: exact).

        tiled_mm: the user's own GGML_CPU_TILED_MM when llama.cpp was loaded (None: specpar's 0).
        """
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
        if self.ubatch > MAX_EXACT_UBATCH:
            out.append(
                f"ubatch={self.ubatch}: passes of {MAX_EXACT_UBATCH + 1}+ tokens take llama.cpp's tiled flash "
                f"attention, so a long prefill or catch-up gives rows other than one-token decoding (use ubatch <= "
                f"{MAX_EXACT_UBATCH})"
            )
        if self.threads > 1:
            out.append(
                f"threads={self.threads}: a one-token pass splits attention over the cache between threads once it "
                f"holds {SPLIT_ATTENTION_FROM}+ tokens, so decoding differs from verification on long contexts (use "
                "threads=1; batch_threads may be any number)"
            )
        if tiled_mm not in (None, "0"):
            out.append(
                f"GGML_CPU_TILED_MM={tiled_mm} in the environment: ggml's tiled matmul sums rows of 8+ tokens in "
                "another order than one token's (unset it, or set it to 0)"
            )
        return out

    def describe(self) -> str:
        """One line for ``-v``: the settings as llama.cpp gets them."""
        return (
            f"llama.cpp: flash attention {'on' if self.flash_attn else 'off'}, repacking "
            f"{'on' if self.repack else 'off'}, passes of at most {self.ubatch} tokens, {self.threads} thread(s) per "
            f"one-token pass, {self.batch_threads} per batch"
        )


def model_warnings(weight_types: set[str], llamafile: bool) -> list[str]:
    """Sentences on what of a model's weights breaks exactness in this build (empty: nothing).

    weight_types: the GGML type names of the model's matrices (2-D weights); llamafile: the build has LLAMAFILE.
    """
    floats = sorted(set(weight_types) & set(FLOAT_WEIGHTS))
    if not (floats and llamafile):
        return []
    return [
        f"weights in {', '.join(floats)} with a llama.cpp built with llamafile: its tinyBLAS kernels multiply 2+ "
        "rows in another order than one row, so verification rows differ from one-token decoding (rebuild with "
        'CMAKE_ARGS="-DGGML_LLAMAFILE=OFF" pip install --no-binary llama-cpp-python --force-reinstall '
        "llama-cpp-python, or use a quantized GGUF)"
    ]
