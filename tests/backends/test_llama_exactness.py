"""The llama.cpp backend is bitwise exact: a server's row for a position is the row of one-token decoding, however
many rows its pass computed, wherever the position sat in the pass, however the prefix reached the cache (cut,
caught up in a chunk, prefilled on another server, fed with a token tree), and on long contexts. Each setting
that breaks it is named in a warning, and changes rows (the tests' power).

Rows are compared as float64 probability rows (temperature 1): equal bits there are equal logits.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

pytest.importorskip("llama_cpp")

from specpar.backends.llama.model import LlamaModel  # noqa: E402
from specpar.backends.llama.settings import LlamaSettings  # noqa: E402
from specpar.core.calls import Score, ScoreTree  # noqa: E402
from specpar.core.decoding import Decoding  # noqa: E402
from specpar.core.errors import SpecparWarning  # noqa: E402
from specpar.core.trees import TokenTree  # noqa: E402
from tiny_gguf import write_tiny_gguf  # noqa: E402

pytestmark = pytest.mark.slow  # (pytest -m 'not slow' leaves it out: the fast inner loop)

ROWS = Decoding(1.0, 0)
rng = np.random.default_rng(5)
SEQ = [int(t) for t in rng.integers(0, 259, size=320)]  # ids of the tiny byte-level vocabulary's normal tokens
PROMPT = 100  # tokens: more than one pass of 63


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture(scope="module")
def model(path):
    return LlamaModel(path)


def one_token_rows(model, tokens, upto: int) -> dict[int, np.ndarray]:
    """{position i: the row after tokens[:i]} for i = 1 .. upto, every token fed alone (one-token decoding)."""
    server, rows = model.server("reference"), {}
    for i in range(1, upto + 1):
        rows[i] = server.run(Score(tuple(tokens[:i]), 0, ROWS)).rows[0]
    server.close()
    return rows


@pytest.fixture(scope="module")
def reference(model):
    return one_token_rows(model, SEQ, 180)


def assert_rows(got, start: int, reference: dict) -> None:
    for i, row in enumerate(got.rows):
        assert np.array_equal(row, reference[start + i]), f"row for position {start + i} differs"


def test_scoring_k_drafts_after_a_cut_cache_gives_the_one_token_rows(model, reference):
    server = model.server("s")
    server.run(Score(tuple(SEQ[:130]), 0, ROWS))
    for k in range(1, 17):
        start = PROMPT + 3 + (7 * k) % 20  # back and forth: the cache is cut at the common prefix each time
        got = server.run(Score(tuple(SEQ[: start + k]), k, ROWS))
        assert got.start == start and len(got.rows) == k + 1
        assert_rows(got, start, reference)


@pytest.mark.parametrize("caught_up", [1, 10, 40, 70])
def test_a_catch_up_chunk_and_drafts_in_one_call_give_the_one_token_rows(model, reference, caught_up):
    """A server that holds the prompt gets ``caught_up`` unseen tokens and 4 drafts in one call (70: two passes)."""
    server = model.server("s")
    server.run(Score(tuple(SEQ[:PROMPT]), 0, ROWS))
    end = PROMPT + caught_up + 4
    got = server.run(Score(tuple(SEQ[:end]), caught_up + 3, ROWS))
    assert_rows(got, PROMPT + 1, reference)


def test_a_second_server_that_prefilled_the_prompt_in_passes_agrees_with_one_token_decoding(model, reference):
    for prefill in (PROMPT, 17):  # the whole prompt at once (passes of 63 + 37), or in calls of 17 tokens
        server = model.server("second")
        for end in range(prefill, PROMPT + 1, prefill) if prefill < PROMPT else [PROMPT]:
            server.run(Score(tuple(SEQ[:end]), 0, ROWS))
        server.run(Score(tuple(SEQ[:PROMPT]), 0, ROWS))
        got = server.run(Score(tuple(SEQ[: PROMPT + 9]), 8, ROWS))
        assert_rows(got, PROMPT + 1, reference)


def test_long_contexts_past_the_split_attention_threshold_stay_exact(model):
    """A one-token pass over a cache of 257+ tokens splits attention between threads when it has several; with one
    thread per one-token pass (and any number per batch) rows stay those of one-token decoding."""
    reference = one_token_rows(model, SEQ, 300)
    batched = LlamaModel(model.path, settings=LlamaSettings(batch_threads=2))
    server = batched.server("long")
    server.run(Score(tuple(SEQ[:280]), 0, ROWS))
    assert_rows(server.run(Score(tuple(SEQ[:300]), 19, ROWS)), 281, reference)


def test_a_token_tree_scores_each_node_as_its_path_alone(model, reference):
    """ScoreTree rows in one pass (sequence ids) equal one-token decoding along each node's own path, and the cache
    afterwards holds the context alone, exactly."""
    ctx = tuple(SEQ[:PROMPT])
    a, b = SEQ[PROMPT], (SEQ[PROMPT] + 1) % 259
    tree = TokenTree()
    na = tree.add(-1, a)
    nb = tree.add(-1, b)
    nc = tree.add(na, SEQ[PROMPT + 1])
    nd = tree.add(na, 7)
    ne = tree.add(nb, 9)
    tree.add(nc, SEQ[PROMPT + 2])
    tree.add(nd, 11)
    tree.add(ne, 12)
    server = model.server("tree")
    server.run(Score(ctx[:60], 0, ROWS))  # part of the context cached, the rest caught up in the tree's pass
    got = server.run(ScoreTree(ctx, tree, ROWS))
    assert len(got.rows) == len(tree) + 1
    assert np.array_equal(got.rows[0], reference[PROMPT])
    for node in range(len(tree)):
        tokens = list(ctx) + [tree.tokens[x] for x in tree.path(node)]
        alone = one_token_rows(model, tokens, len(tokens))[len(tokens)]
        assert np.array_equal(got.rows[1 + node], alone), f"node {node} at depth {tree.depths[node]}"
    assert server.tokens == ctx and server.cached_len(tuple(SEQ)) == PROMPT
    assert_rows(server.run(Score(tuple(SEQ[: PROMPT + 5]), 4, ROWS)), PROMPT + 1, reference)


def _rows_with(model_path, settings: LlamaSettings, reference, long: bool = False) -> bool:
    """Whether a server in ``settings`` gives the one-token rows (short: a 64-token catch-up and drafts)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpecparWarning)
        model = LlamaModel(model_path, settings=settings)
    server = model.server("x")
    if long:
        server.run(Score(tuple(SEQ[:280]), 0, ROWS))
        return all(np.array_equal(server.run(Score(tuple(SEQ[:i]), 0, ROWS)).rows[0], reference[i]) for i in (290,))
    server.run(Score(tuple(SEQ[:40]), 0, ROWS))
    got = server.run(Score(tuple(SEQ[:130]), 20, ROWS))
    return all(np.array_equal(row, reference[110 + i]) for i, row in enumerate(got.rows))


@pytest.mark.parametrize(
    "settings,named",
    [
        (LlamaSettings(ubatch=512), "ubatch=512"),
        (LlamaSettings(repack=True), "repack=True"),
        (LlamaSettings(flash_attn=False), "flash_attn=False"),
    ],
)
def test_each_setting_that_breaks_exactness_is_named_and_changes_rows(path, reference, settings, named, tmp_path):
    with pytest.warns(SpecparWarning, match=named):
        LlamaModel(path, settings=settings)
    if settings.repack:  # in a process of its own: llama.cpp's AMX kernels crash on some CPUs (see below)
        rows = _probe_rows_in_subprocess(path, settings, tmp_path)
        if rows is None:
            assert amx_cpu(), "repacked weights crashed llama.cpp on a CPU without AMX"
        else:
            assert not all(np.array_equal(row, reference[110 + i]) for i, row in enumerate(rows))
    else:
        assert not _rows_with(path, settings, reference)
    assert _rows_with(path, LlamaSettings(), reference)  # the same check passes in the exact settings


def amx_cpu() -> bool:
    """Whether this CPU has Intel AMX (Sapphire Rapids and later), where llama.cpp 0.3.36's repacked AMX matmul
    crashes with a segmentation fault (ggml-org/llama.cpp#20824)."""
    try:
        with open("/proc/cpuinfo") as f:
            return " amx_int8" in f.read()
    except OSError:
        return False


PROBE = """
import sys, warnings
import numpy as np
from specpar.backends.llama.model import LlamaModel
from specpar.backends.llama.settings import LlamaSettings
from specpar.core.calls import Score
from specpar.core.decoding import Decoding
warnings.simplefilter("ignore")
server = LlamaModel({path!r}, settings=LlamaSettings(**{fields!r})).server("x")
seq, rows = {seq!r}, Decoding(1.0, 0)
server.run(Score(tuple(seq[:40]), 0, rows))
np.save({out!r}, np.array(server.run(Score(tuple(seq[:130]), 20, rows)).rows))
"""


def _probe_rows_in_subprocess(path, settings: LlamaSettings, tmp_path):
    """``_rows_with``'s rows (a 40-token prefill, then a 90-token catch-up with 20 drafts) from a process of its own:
    the rows, or None where llama.cpp killed that process with a signal."""
    from dataclasses import asdict

    out = tmp_path / "rows.npy"
    code = PROBE.format(path=str(path), fields=asdict(settings), seq=SEQ[:130], out=str(out))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    if done.returncode < 0:
        return None
    assert done.returncode == 0, done.stderr
    return list(np.load(out))


def test_threads_on_one_token_passes_break_long_contexts_and_are_named(path, model):
    reference = one_token_rows(model, SEQ, 300)
    settings = LlamaSettings(threads=2)
    with pytest.warns(SpecparWarning, match="threads=2"):
        LlamaModel(path, settings=settings)
    # decoding alone (threads=2) against batched verification of the same positions (both on this model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpecparWarning)
        two = LlamaModel(path, settings=settings)
    decode = one_token_rows(two, SEQ, 300)
    assert not all(np.array_equal(decode[i], reference[i]) for i in range(281, 301))
    assert all(np.array_equal(decode[i], reference[i]) for i in range(1, 200))  # short contexts are not split


SUBPROCESS = """
import sys, warnings
sys.path.insert(0, {tests!r})
import numpy as np
from specpar.backends.llama.model import LlamaModel
from specpar.core.calls import Score
from specpar.core.decoding import Decoding
from specpar.core.errors import SpecparWarning
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    model = LlamaModel({path!r})
print(any("GGML_CPU_TILED_MM=1" in str(w.message) for w in caught))
seq, rows = {seq!r}, Decoding(1.0, 0)
a, b = model.server("a"), model.server("b")
one = [a.run(Score(tuple(seq[:i]), 0, rows)).rows[0] for i in range(1, 61)]
batch = b.run(Score(tuple(seq[:60]), 20, rows)).rows
print(all(np.array_equal(x, y) for x, y in zip(one[39:], batch)))
"""


@pytest.mark.parametrize("tiled", [None, "1"])
def test_ggml_tiled_matmul_is_switched_off_and_a_user_who_switches_it_on_is_told(path, tiled):
    """specpar sets GGML_CPU_TILED_MM=0 (ggml reads it once per process): rows are exact; a user's =1 is kept,
    named in the warning, and makes a 21-row pass differ from one-token decoding."""
    env = {k: v for k, v in os.environ.items() if k != "GGML_CPU_TILED_MM"}
    if tiled:
        env["GGML_CPU_TILED_MM"] = tiled
    code = SUBPROCESS.format(
        tests=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), path=str(path), seq=SEQ[:60]
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    warned, exact = out.stdout.split()
    assert (warned, exact) == (("True", "False") if tiled else ("False", "True"))
