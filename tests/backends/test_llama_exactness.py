"""The llama.cpp backend's exact mode is bitwise exact: a server's row for a position after the prompt is the row of
one-token decoding after the same prefill, however many rows its pass computed, wherever the position sat in the
pass, however the rest of the prefix reached the cache (cut, caught up in a chunk, prefilled on another server or
later, fed with a token tree), on long contexts and for every setting the mode allows. The prompt is prefilled in
its canonical passes (a function of its length alone), so every server holds the same cache for it; a cache filled
for another prompt is kept only in the passes both share. Each setting that breaks exactness is named in a warning
and changes rows (the tests' power), and so does each rule of the canonical prefill.

Rows are compared as float64 probability rows (temperature 1): equal bits there are equal logits.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import warnings

import numpy as np
import pytest

pytest.importorskip("llama_cpp")

from specpar.backends.llama import prefill  # noqa: E402
from specpar.backends.llama.library import build_has  # noqa: E402
from specpar.backends.llama.model import LlamaModel  # noqa: E402
from specpar.backends.llama.settings import LlamaSettings  # noqa: E402
from specpar.core.calls import Score, ScoreTree  # noqa: E402
from specpar.core.decoding import Decoding  # noqa: E402
from specpar.core.errors import ConfigError, SpecparWarning  # noqa: E402
from specpar.core.trees import TokenTree  # noqa: E402
from tiny_gguf import write_tiny_gguf  # noqa: E402

pytestmark = pytest.mark.slow  # (pytest -m 'not slow' leaves it out: the fast inner loop)

rng = np.random.default_rng(5)
SEQ = [int(t) for t in rng.integers(0, 259, size=320)]  # ids of the tiny byte-level vocabulary's normal tokens
PROMPT = 100  # tokens: a canonical pass of 99 rows (llama.cpp's tiled matmul and flash attention), then exact ones


def rows(prompt_len: int = 0) -> Decoding:
    """Probability rows (temperature 1) of a request whose prompt is ``prompt_len`` tokens (0: none given)."""
    return Decoding(1.0, 0, prompt_len=prompt_len)


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture(scope="module")
def model(path):
    return LlamaModel(path)


def quiet_model(path, **settings) -> LlamaModel:
    """A model in ``settings`` (exact mode's keywords), its exactness warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpecparWarning)
        return LlamaModel(path, settings=LlamaSettings(**settings))


def one_token_rows(model, tokens, upto: int, prompt_len: int = 0) -> dict[int, np.ndarray]:
    """{position i: the row after tokens[:i]} for i = max(1, prompt_len) .. upto: the prompt prefilled as every
    server of its request prefills it, then every token fed alone (one-token decoding)."""
    server, out = model.server("reference"), {}
    for i in range(max(1, prompt_len), upto + 1):
        out[i] = server.run(Score(tuple(tokens[:i]), 0, rows(prompt_len))).rows[0]
    server.close()
    return out


@pytest.fixture(scope="module")
def reference(model):
    return {0: one_token_rows(model, SEQ, 180), PROMPT: one_token_rows(model, SEQ, 180, PROMPT)}


def same_rows(got, start: int, reference: dict) -> bool:
    return all(np.array_equal(row, reference[start + i]) for i, row in enumerate(got.rows))


def assert_rows(got, start: int, reference: dict) -> None:
    for i, row in enumerate(got.rows):
        assert np.array_equal(row, reference[start + i]), f"row for position {start + i} differs"


@pytest.mark.parametrize("prompt_len", [0, PROMPT])
def test_scoring_k_drafts_after_a_cut_cache_gives_the_one_token_rows(model, reference, prompt_len):
    server = model.server("s")
    server.run(Score(tuple(SEQ[:130]), 0, rows(prompt_len)))
    for k in range(1, 17):
        start = PROMPT + 3 + (7 * k) % 20  # back and forth: the cache is cut at the common prefix each time
        got = server.run(Score(tuple(SEQ[: start + k]), k, rows(prompt_len)))
        assert got.start == start and len(got.rows) == k + 1
        assert_rows(got, start, reference[prompt_len])


@pytest.mark.parametrize("prompt_len", [0, PROMPT])
@pytest.mark.parametrize("caught_up", [1, 10, 40, 70])
def test_a_catch_up_chunk_and_drafts_in_one_call_give_the_one_token_rows(model, reference, caught_up, prompt_len):
    """A server that holds the prompt gets ``caught_up`` unseen tokens and 4 drafts in one call (several passes)."""
    server = model.server("s")
    server.run(Score(tuple(SEQ[:PROMPT]), 0, rows(prompt_len)))
    end = PROMPT + caught_up + 4
    got = server.run(Score(tuple(SEQ[:end]), caught_up + 3, rows(prompt_len)))
    assert_rows(got, PROMPT + 1, reference[prompt_len])


@pytest.mark.parametrize("late", [1, 40, 75])
def test_a_replica_that_prefills_later_than_the_others_gives_the_same_rows(model, reference, late):
    """A DSI target server that first sees the request ``late`` tokens after the prompt: the prompt in its canonical
    pass, the tokens after it and the drafts in exact passes, in one call."""
    server = model.server("late")
    end = PROMPT + late + 4
    got = server.run(Score(tuple(SEQ[:end]), late + 4, rows(PROMPT)))
    assert_rows(got, PROMPT, reference[PROMPT])


def test_the_prompts_region_is_fed_again_when_its_last_token_is_verified(model, reference):
    """A call whose drafts start right after the prompt cuts the cache to all but the prompt's last token, which is
    outside the canonical region: fed again with the drafts, it gives the rows of the prompt's own prefill."""
    server = model.server("s")
    server.run(Score(tuple(SEQ[: PROMPT + 30]), 0, rows(PROMPT)))
    got = server.run(Score(tuple(SEQ[: PROMPT + 5]), 5, rows(PROMPT)))
    assert_rows(got, PROMPT, reference[PROMPT])


def test_a_server_that_prefilled_the_prompt_in_passes_agrees_with_one_token_decoding(model, reference):
    for prefill_calls in (PROMPT, 17):  # the whole prompt at once, or in calls of 17 tokens (no prompt given)
        server = model.server("second")
        for end in range(prefill_calls, PROMPT + 1, prefill_calls) if prefill_calls < PROMPT else [PROMPT]:
            server.run(Score(tuple(SEQ[:end]), 0, rows()))
        server.run(Score(tuple(SEQ[:PROMPT]), 0, rows()))
        got = server.run(Score(tuple(SEQ[: PROMPT + 9]), 8, rows()))
        assert_rows(got, PROMPT + 1, reference[0])


PASS = 32  # a model whose prompt passes hold 32 tokens: the prompt of 100 goes in passes 0-32-64-96, then 96-99


@pytest.fixture(scope="module")
def passes32(path):
    model = LlamaModel(path, settings=LlamaSettings(prefill_ubatch=PASS))
    return model, one_token_rows(model, SEQ, 150, PROMPT)


def test_a_cache_cut_inside_the_prompt_keeps_only_the_passes_both_prompts_share(passes32):
    """A server that held another prompt sharing 66 tokens with this one keeps the two whole passes both prefilled
    alike (64 tokens), prefills the rest canonically and gives the rows of a fresh prefill."""
    model, reference = passes32
    other = SEQ[:66] + [(t + 1) % 259 for t in SEQ[66:68]]
    server = model.server("cut")
    server.run(Score(tuple(other), 0, rows(len(other))))
    fed, decode = [], server._ctx.decode
    server._ctx.decode = lambda tokens, *args, **kw: fed.append(len(tokens)) or decode(tokens, *args, **kw)
    got = server.run(Score(tuple(SEQ[: PROMPT + 6]), 6, rows(PROMPT)))
    assert_rows(got, PROMPT, reference)
    assert fed == [PROMPT + 6 - 2 * PASS] and server.region_end == PROMPT - 1


def test_keeping_what_another_prompts_last_pass_computed_changes_the_rows(path, monkeypatch):
    """The control of the rule above: the prompt in one pass of 99 rows (llama.cpp's tiled flash attention), on a
    server that held a 50-token prompt sharing 48 tokens (one pass of 49 rows, the per-row kernel): keeping those 48
    gives other rows than a fresh prefill; keeping none, as the rule says, the same."""
    model = LlamaModel(path, settings=LlamaSettings(prefill_ubatch=128))
    reference = one_token_rows(model, SEQ, 110, PROMPT)
    other = SEQ[:48] + [(t + 1) % 259 for t in SEQ[48:50]]
    everything, every_token = (lambda held, wanted, size: prefill.EVERYTHING), (lambda keep, end, size: keep)
    for (reused, kept), expected in (
        ((prefill.reusable, prefill.whole_passes), True),
        ((everything, every_token), False),
    ):
        monkeypatch.setattr(prefill, "reusable", reused)
        monkeypatch.setattr(prefill, "whole_passes", kept)
        server = model.server("cut")
        server.run(Score(tuple(other), 0, rows(len(other))))
        assert same_rows(server.run(Score(tuple(SEQ[: PROMPT + 6]), 6, rows(PROMPT))), PROMPT, reference) is expected


def test_a_prompt_of_the_same_length_sharing_part_of_a_pass_is_prefilled_again_from_that_pass(path, monkeypatch):
    """Two prompts of one length share their region's shape, not its keys and values: a server that held another
    100-token prompt sharing 48 tokens (inside its one canonical pass of 99) feeds that pass again whole and gives a
    fresh prefill's rows. Control: keeping the 48 shared tokens (the pass fed from its middle) gives other rows."""
    model = LlamaModel(path, settings=LlamaSettings(prefill_ubatch=128))
    reference = one_token_rows(model, SEQ, 110, PROMPT)
    other = SEQ[:48] + [(t + 1) % 259 for t in SEQ[48:PROMPT]]
    for kept, expected in ((prefill.whole_passes, True), (lambda keep, end, size: keep, False)):
        monkeypatch.setattr(prefill, "whole_passes", kept)
        server = model.server("same-length")
        server.run(Score(tuple(other), 0, rows(len(other))))
        fed, decode = [], server._ctx.decode
        server._ctx.decode = lambda tokens, *args, **kw: fed.append(len(tokens)) or decode(tokens, *args, **kw)
        assert same_rows(server.run(Score(tuple(SEQ[: PROMPT + 6]), 6, rows(PROMPT))), PROMPT, reference) is expected
        assert fed == [PROMPT + 6 if expected else PROMPT + 6 - 48]


def test_a_chat_that_goes_on_keeps_the_passes_of_its_earlier_prompt(passes32):
    """The next turn's prompt holds the last request's prompt and output: its server keeps the whole passes of the
    earlier prefill and gives the rows of a fresh server's."""
    model, _ = passes32
    first, longer = 70, PROMPT
    server = model.server("chat")
    server.run(Score(tuple(SEQ[: first + 20]), 0, rows(first)))  # a request of 70 tokens and 20 of output
    fresh = model.server("fresh")
    want = fresh.run(Score(tuple(SEQ[: longer + 5]), 5, rows(longer)))
    fed, decode = [], server._ctx.decode
    server._ctx.decode = lambda tokens, *args, **kw: fed.append(len(tokens)) or decode(tokens, *args, **kw)
    got = server.run(Score(tuple(SEQ[: longer + 5]), 5, rows(longer)))
    assert all(np.array_equal(a, b) for a, b in zip(got.rows, want.rows))
    assert fed == [longer + 5 - 2 * PASS]  # the first two passes kept


def test_the_prompts_passes_are_the_same_on_any_number_of_threads(path):
    one, two = quiet_model(path, batch_threads=1), quiet_model(path, batch_threads=2)
    a = one.server("a").run(Score(tuple(SEQ[: PROMPT + 8]), 8, rows(PROMPT)))
    b = two.server("b").run(Score(tuple(SEQ[: PROMPT + 8]), 8, rows(PROMPT)))
    assert all(np.array_equal(x, y) for x, y in zip(a.rows, b.rows))


def test_the_prompt_in_one_canonical_pass_differs_from_exact_passes(model, reference):
    """What the region buys is real: the prompt in llama.cpp's tiled kernels gives other rows than in exact passes
    (so the reference must prefill as the servers do, and every server of a request must prefill alike)."""
    assert not all(np.array_equal(reference[0][i], reference[PROMPT][i]) for i in range(PROMPT, 130))


def test_long_contexts_past_the_split_attention_threshold_stay_exact(model):
    """A one-token pass over a cache of 257+ tokens splits attention between threads when it has several; with one
    thread per one-token pass (and any number per batch) rows stay those of one-token decoding."""
    reference = one_token_rows(model, SEQ, 300, PROMPT)
    batched = LlamaModel(model.path, settings=LlamaSettings(batch_threads=2))
    server = batched.server("long")
    server.run(Score(tuple(SEQ[:280]), 0, rows(PROMPT)))
    assert_rows(server.run(Score(tuple(SEQ[:300]), 19, rows(PROMPT))), 281, reference)


@pytest.mark.parametrize("prompt_len", [0, PROMPT])
def test_a_token_tree_scores_each_node_as_its_path_alone(model, reference, prompt_len):
    """ScoreTree rows in one call (sequence ids) equal one-token decoding along each node's own path, and the cache
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
    server.run(Score(ctx[:60], 0, rows()))  # part of the context cached, the rest caught up in the tree's call
    got = server.run(ScoreTree(ctx, tree, rows(prompt_len)))
    assert len(got.rows) == len(tree) + 1
    assert np.array_equal(got.rows[0], reference[prompt_len][PROMPT])
    for node in range(len(tree)):
        tokens = list(ctx) + [tree.tokens[x] for x in tree.path(node)]
        alone = one_token_rows(model, tokens, len(tokens), prompt_len)[len(tokens)]
        assert np.array_equal(got.rows[1 + node], alone), f"node {node} at depth {tree.depths[node]}"
    assert server.tokens == ctx and server.cached_len(tuple(SEQ)) == PROMPT
    assert_rows(server.run(Score(tuple(SEQ[: PROMPT + 5]), 4, rows(prompt_len))), PROMPT + 1, reference[prompt_len])


def _exact_with(model, reference, prompt_len: int) -> bool:
    """Whether a server of ``model`` gives the one-token rows: drafts after a cut cache (k = 1 .. 10) and a 40-token
    catch-up with 4 drafts on a second server that first holds a shorter context."""
    server = model.server("x")
    server.run(Score(tuple(SEQ[:130]), 0, rows(prompt_len)))
    for k in range(1, 11):
        start = PROMPT + 3 + (7 * k) % 20
        if not same_rows(server.run(Score(tuple(SEQ[: start + k]), k, rows(prompt_len))), start, reference):
            return False
    second = model.server("y")
    second.run(Score(tuple(SEQ[:PROMPT]), 0, rows(prompt_len)))
    return same_rows(second.run(Score(tuple(SEQ[: PROMPT + 44]), 43, rows(prompt_len))), PROMPT + 1, reference)


COMBINATIONS = list(itertools.product((1, 4, 7), (16, 99, 512), (1, 2)))  # ubatch, prefill_ubatch, batch_threads


@pytest.mark.parametrize("ubatch,prefill_ubatch,batch_threads", COMBINATIONS)
def test_every_setting_combination_the_exact_mode_allows_gives_the_one_token_rows(
    path, ubatch, prefill_ubatch, batch_threads
):
    model = LlamaModel(path, settings=LlamaSettings(ubatch=ubatch, prefill_ubatch=prefill_ubatch,
                                                    batch_threads=batch_threads))  # fmt: skip
    assert model.exact
    for prompt_len in (0, PROMPT):
        assert _exact_with(model, one_token_rows(model, SEQ, 160, prompt_len), prompt_len)


@pytest.mark.parametrize(
    "settings,named",
    [
        ({"ubatch": 8}, "ubatch=8"),
        ({"ubatch": 512}, "ubatch=512"),
        ({"flash_attn": False}, "flash_attn=False"),
    ],
)
def test_each_setting_that_breaks_exactness_is_named_and_changes_rows(path, settings, named):
    with pytest.warns(SpecparWarning, match=named):
        LlamaModel(path, settings=LlamaSettings(**settings))
    broken = quiet_model(path, **settings)
    assert not broken.exact
    assert not _exact_with(broken, one_token_rows(broken, SEQ, 160, PROMPT), PROMPT)


def test_threads_on_one_token_passes_break_long_contexts_and_are_named(path, model):
    reference = one_token_rows(model, SEQ, 300, PROMPT)
    with pytest.warns(SpecparWarning, match="threads=2"):
        LlamaModel(path, settings=LlamaSettings(threads=2))
    # decoding alone (threads=2) against batched verification of the same positions (both on this model)
    decode = one_token_rows(quiet_model(path, threads=2), SEQ, 300, PROMPT)
    assert not all(np.array_equal(decode[i], reference[i]) for i in range(281, 301))
    assert all(np.array_equal(decode[i], reference[i]) for i in range(PROMPT, 200))  # short contexts are not split


def test_the_fast_mode_says_what_it_gives_up_and_its_rows_depend_on_the_pass(path, reference):
    """The fast mode warns of nothing (it is asked for) and is not exact: its verification rows differ from its own
    one-token decoding (its passes take the batch-size-dependent kernels)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", SpecparWarning)
        fast = LlamaModel(path, exact=False)
    assert not fast.exact and "fast mode" in fast.describe() and "not bitwise exact" in fast.describe()
    assert not _exact_with(fast, one_token_rows(fast, SEQ, 160, PROMPT), PROMPT)
    with pytest.raises(ConfigError, match="exact=True but the settings given are the fast mode's"):
        LlamaModel(path, exact=True, settings=LlamaSettings.fast())


SUBPROCESS = """
import sys, warnings
sys.path.insert(0, {tests!r})
import numpy as np
from specpar.backends.llama.model import LlamaModel
from specpar.backends.llama.settings import LlamaSettings
from specpar.core.calls import Score
from specpar.core.decoding import Decoding
from specpar.core.errors import SpecparWarning
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    model = LlamaModel({path!r}, settings=LlamaSettings(**{settings!r}))
print(model.settings.ubatch, any("ubatch=" in str(w.message) for w in caught))
seq, rows = {seq!r}, Decoding(1.0, 0)
a, b = model.server("a"), model.server("b")
one = [a.run(Score(tuple(seq[:i]), 0, rows)).rows[0] for i in range(1, 61)]
batch = b.run(Score(tuple(seq[:60]), 20, rows)).rows
print(all(np.array_equal(x, y) for x, y in zip(one[39:], batch)))
"""


def _in_a_process(path, tiled: str | None, settings: dict) -> tuple[str, str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GGML_CPU_TILED_MM"}
    if tiled is not None:
        env["GGML_CPU_TILED_MM"] = tiled
    code = SUBPROCESS.format(tests=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), path=str(path),
                             seq=SEQ[:60], settings=settings)  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    return out.returncode, out.stdout.split(), out.stderr


@pytest.mark.parametrize(
    "tiled,settings,expected",
    [
        (None, {}, ["7", "False", "True"]),  # ggml's default (on): exact passes of 7
        ("0", {}, ["63", "False", "True"]),  # a user's 0: the tiled matmul never runs, passes of 63 are exact
        ("0", {"ubatch": 21}, ["21", "False", "True"]),
        ("1", {"ubatch": 21}, ["21", "True", "False"]),  # control: with it on, a pass of 21 rows is not exact
    ],
)
def test_the_exact_pass_follows_ggmls_tiled_matmul_as_the_process_reads_it(path, tiled, settings, expected):
    """ggml reads GGML_CPU_TILED_MM once per process: the exact mode keeps its passes below the tiled matmul's 8 rows
    while it is on, below flash attention's 64 when it is off, and names a longer pass."""
    rc, out, err = _in_a_process(path, tiled, settings)
    assert rc == 0, err
    assert out == expected


def test_repacked_weights_are_named_and_change_rows(path):
    """repack=True: llama.cpp's extra buffers (AMX where the CPU has it, else its repacked gemm) multiply 4+ rows
    otherwise than one; run in a process of its own, as this build's AMX matmul faults on AMX CPUs such as this
    machine's (ggml-org/llama.cpp#20824: a general protection fault in ldtilecfg)."""
    with pytest.warns(SpecparWarning, match="repack=True"):
        LlamaModel(path, settings=LlamaSettings(repack=True))
    rc, out, err = _in_a_process(path, None, {"repack": True})
    if rc == -signal.SIGSEGV and build_has("AMX_INT8"):
        pytest.skip("llama.cpp's AMX kernels fault on this machine (the fast mode leaves repacking off here)")
    assert rc == 0, err
    assert out == ["7", "False", "False"]
