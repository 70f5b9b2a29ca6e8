"""llama.cpp servers under every algorithm and runtime, on tiny GGUF files written here (no downloads): the target's
own greedy tokens and distribution, caches kept and cut, cancellation, the GIL, shared weights, the tokenizer, the
engine's choice of backend, and bad input named in one clear error each."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
import threading
import time
import warnings
from collections import Counter

import numpy as np
import pytest

pytest.importorskip("llama_cpp")

from conftest import RAY_OPTIONS  # noqa: E402
from specpar import Engine, SamplingParams, generate  # noqa: E402
from specpar.backends import loading as loading_module  # noqa: E402
from specpar.backends.llama import library  # noqa: E402
from specpar.backends.llama import model as llama_model  # noqa: E402
from specpar.backends.llama import server as llama_server  # noqa: E402
from specpar.backends.llama.model import LlamaModel, check_same_tokenizer_files, check_same_vocabulary  # noqa: E402
from specpar.backends.loading import choose_backend  # noqa: E402
from specpar.core.calls import Draft, Score  # noqa: E402
from specpar.core.decoding import Decoding  # noqa: E402
from specpar.core.errors import ConfigError, SpecparWarning  # noqa: E402
from specpar.core.latency import LatencyProfile  # noqa: E402
from specpar.core.logits_processors import log_softmax  # noqa: E402
from specpar.core.stopping import end_of_text_ids  # noqa: E402
from stats import chi_square_p_value  # noqa: E402
from tiny_gguf import write_tiny_gguf  # noqa: E402

pytestmark = pytest.mark.slow  # (pytest -m 'not slow' leaves it out: the fast inner loop)

LATENCIES = (LatencyProfile(2.0, 1.0, 0.1), LatencyProfile.uniform(0.1))


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    return write_tiny_gguf(root / "target.gguf"), write_tiny_gguf(root / "drafter.gguf", noise=0.01)


@pytest.fixture(scope="module")
def pair(paths):
    return LlamaModel(paths[0], name="t", latency=LATENCIES[0]), LlamaModel(paths[1], name="d", latency=LATENCIES[1])


def reference_greedy(model: LlamaModel, prompt, n: int) -> list[int]:
    """One-token greedy decoding: the prompt prefilled as every server of a request prefills it, then every token
    its own pass."""
    server, seq, greedy = model.server("reference"), list(prompt), Decoding(prompt_len=len(prompt))
    for _ in range(n):
        seq.append(server.run(Score(tuple(seq), 0, greedy)).rows[0])
    server.close()
    return seq[len(prompt) :]


PROMPTS = [[int(t) for t in np.random.default_rng(s).integers(0, 259, size=5 + 9 * s)] for s in range(3)]


@pytest.mark.parametrize("runtime", ["threads", "virtual"])
def test_every_algorithm_returns_the_targets_own_greedy_tokens(pair, runtime, no_thread_leak):
    target, drafter = pair
    acceptance = []
    for prompt in PROMPTS:
        expected = reference_greedy(target, prompt, 24)
        configs = [("nonsi", None, 1, None)] + [
            (a, k, sp, None) for a, k, sp in itertools.product(("si", "dsi"), (1, 3, 8), (1, 2))
        ]
        configs += [("si", None, 1, (2, 2, 1)), ("dsi", None, 2, "best:6")]
        for algorithm, k, sp, tree in configs:
            res = generate(
                prompt,
                target,
                drafter,
                algorithm=algorithm,
                max_tokens=24,
                lookahead=k,
                sp_degree=sp,
                runtime=runtime,
                tree=tree,
                ignore_eos=True,
            )
            assert res.tokens == expected, f"{algorithm} k={k} sp={sp} tree={tree} on {runtime}"
            if algorithm != "nonsi" and tree is None:
                acceptance.append(res.acceptance_rate)
    assert 0.3 < np.nanmean(acceptance) < 0.95, acceptance  # accept and reject paths both ran


@pytest.mark.parametrize("prefill_replicas,dedicated_cursor", [(False, False), (False, True), (True, True)])
def test_dsi_replicas_that_prefill_late_or_at_once_give_the_targets_tokens(pair, prefill_replicas, dedicated_cursor):
    """DSI's replicas that first see the request mid-generation (no prefill at the start: the prompt's canonical
    passes and a catch-up in one call) or prefill it beside the first (prefill_replicas): the target's own tokens,
    on a prompt longer than one exact pass."""
    target, drafter = pair
    prompt = [int(t) for t in np.random.default_rng(9).integers(0, 259, size=70)]
    expected = reference_greedy(target, prompt, 24)
    for k in (1, 4):
        res = generate(prompt, target, drafter, algorithm="dsi", max_tokens=24, lookahead=k, sp_degree=3,
                       prefill_replicas=prefill_replicas, dedicated_cursor=dedicated_cursor, ignore_eos=True)  # fmt: skip
        assert res.tokens == expected, f"k={k}"


def test_hsd_over_two_gguf_drafters_returns_the_targets_tokens(pair, paths, tmp_path):
    target, drafter = pair
    smallest = LlamaModel(write_tiny_gguf(tmp_path / "d2.gguf", noise=0.03), latency=LatencyProfile.uniform(0.05))
    for algorithm in ("hsd", "hsd-sp"):
        res = generate(PROMPTS[1], target, [smallest, drafter], algorithm=algorithm, max_tokens=16, ignore_eos=True)
        assert res.tokens == reference_greedy(target, PROMPTS[1], 16), algorithm


def test_ray_runs_each_server_in_an_actor_that_loads_the_gguf_itself(pair, ray_local):
    target, drafter = pair
    expected = reference_greedy(target, PROMPTS[2], 16)
    for algorithm, sp in (("nonsi", 1), ("si", 1), ("dsi", 2)):
        res = generate(
            PROMPTS[2],
            target,
            drafter,
            algorithm=algorithm,
            max_tokens=16,
            lookahead=3,
            sp_degree=sp,
            runtime="ray",
            runtime_options=dict(RAY_OPTIONS, local_pools=()),
            ignore_eos=True,
        )
        assert res.tokens == expected, algorithm


V, N, PROMPT, SAMPLES = 4, 2, [0, 1], 1500


@pytest.fixture(scope="module", params=[True, False], ids=["exact", "fast"])
def small_vocab_pair(tmp_path_factory, request):
    root = tmp_path_factory.mktemp("v4")
    make = lambda name, seed: LlamaModel(  # noqa: E731
        write_tiny_gguf(root / name, vocab=V, seed=seed, layers=1, std=0.2, out_std=0.2),
        name=name,
        exact=request.param,
    )
    return make("t.gguf", 11), make("d.gguf", 12)


def _joint(model: LlamaModel, temperature: float) -> dict:
    server, out = model.server("joint"), {}
    for seq in itertools.product(range(V), repeat=N):
        decoding = Decoding(temperature, 0, prompt_len=len(PROMPT))
        rows = server.run(Score(tuple(PROMPT + list(seq)), N, decoding)).rows
        out[seq] = float(np.prod([rows[i][t] for i, t in enumerate(seq)]))
    return out


@pytest.mark.parametrize("algorithm,lookahead", [("si", 2), ("dsi", 1)])
def test_sampling_follows_the_targets_distribution(small_vocab_pair, algorithm, lookahead):
    """In both modes (the fast mode: lossless in distribution up to rounding), with the drafter's own distribution
    as the control the samples must reject."""
    target, drafter = small_vocab_pair
    temperature = 0.9
    with Engine(target, drafter, sp_degree=2, runtime="threads") as engine:
        counts = Counter(
            tuple(
                engine.generate(
                    PROMPT,
                    algorithm=algorithm,
                    lookahead=lookahead,
                    max_tokens=N,
                    temperature=temperature,
                    seed=s,
                    coupling="rejection",
                ).tokens
            )
            for s in range(SAMPLES)
        )
    target_joint, drafter_joint = _joint(target, temperature), _joint(drafter, temperature)
    assert chi_square_p_value(counts, target_joint) > 1e-3
    # power: the same samples reject the drafter's own distribution (what a sampler that skipped verification gives)
    assert chi_square_p_value(counts, drafter_joint) < 1e-6


@pytest.fixture(scope="module")
def fast_pair(paths):
    return (
        LlamaModel(paths[0], name="t", latency=LATENCIES[0], exact=False),
        LlamaModel(paths[1], name="d", latency=LATENCIES[1], exact=False),
    )


@pytest.mark.parametrize("runtime", ["threads", "virtual"])
def test_the_fast_mode_runs_every_algorithm(fast_pair, tmp_path, runtime, no_thread_leak):
    """Every algorithm runs in the fast mode; non-SI there is llama.cpp's own plain decoding (the prompt in one pass,
    then one token per pass), token for token."""
    target, drafter = fast_pair
    smallest = LlamaModel(write_tiny_gguf(tmp_path / "d2.gguf", noise=0.03), latency=LATENCIES[1], exact=False)
    expected = reference_greedy(target, PROMPTS[2], 24)
    configs = [("nonsi", None, 1, None, drafter), ("si", 3, 1, None, drafter), ("dsi", 3, 2, None, drafter),
               ("si", None, 1, (2, 2, 1), drafter), ("dsi", None, 2, "best:6", drafter),
               ("hsd", 2, 1, None, [smallest, drafter]), ("hsd-sp", 2, 2, None, [smallest, drafter])]  # fmt: skip
    for algorithm, k, sp, tree, d in configs:
        res = generate(PROMPTS[2], target, d, algorithm=algorithm, max_tokens=24, lookahead=k, sp_degree=sp,
                       tree=tree, runtime=runtime, ignore_eos=True, exact=False)  # fmt: skip
        assert len(res.tokens) == 24 and all(0 <= t < target.vocab_size for t in res.tokens), algorithm
        if algorithm == "nonsi":
            assert res.tokens == expected


def test_a_mode_asked_of_models_loaded_in_the_other_is_refused(pair, fast_pair, paths):
    with pytest.raises(ConfigError, match="exact=True but t runs in the fast mode"):
        Engine(*fast_pair, exact=True)
    with pytest.raises(ConfigError, match="exact=False but t runs in the exact mode"):
        generate(PROMPTS[0], *pair, max_tokens=2, exact=False)
    with pytest.raises(ConfigError, match="exact must be True, False or None"):
        Engine(str(paths[0]), str(paths[1]), exact="no")
    with pytest.raises(ConfigError, match=r"--no-exact\) is llama.cpp's fast mode; the transformers backend"):
        loading_module.load_pair(str(paths[0]), str(paths[1]), backend="transformers", exact=False)


def test_a_fast_server_refuses_an_exact_request_and_answers_the_others(fast_pair, pair):
    """serve: the models run in one mode; a request's exact=true is refused (400, param "exact") where it is the
    fast mode, exact=false is answered in either (the exact mode's answer is a correct one for it)."""
    pytest.importorskip("fastapi")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "entrypoints", "server"))
    from test_server import post, running

    from specpar.entrypoints.server.app import create_app

    for models, exact_ok in ((fast_pair, False), (pair, True)):
        engine = Engine(*models, sp_degree=2, units=1)
        with running(create_app(engine, "tiny", api_key=None, max_model_len=512)) as url:
            body = {"prompt": PROMPTS[0], "max_tokens": 4, "temperature": 0}
            status, data = post(url, "/v1/completions", {**body, "exact": True}, key=None)
            assert status == (200 if exact_ok else 400), data
            if not exact_ok:
                assert data["error"]["param"] == "exact" and "fast mode" in data["error"]["message"]
            status, data = post(url, "/v1/completions", {**body, "exact": False}, key=None)
            assert status == 200, data


def test_no_exact_with_a_float_gguf_says_what_it_means(tmp_path, capsys):
    """--no-exact -v on a float32 GGUF: the fast mode's line, and what llamafile's kernels (in this build or not) do
    with float weights; in the exact mode the same file is named not exact where the build has llamafile."""
    from specpar.entrypoints import cli

    t = str(write_tiny_gguf(tmp_path / "f32.gguf", quantized=False))
    argv = ["generate", "def f(", "-N", "3", "--algorithm", "nonsi", "--target", t, "--drafter", t, "-v"]
    assert cli.main(argv + ["--no-exact"]) == 0
    err = capsys.readouterr().err
    assert "fast mode" in err and "weights in F32" in err
    assert ("llamafile's tinyBLAS kernels (this build has them)" if library.build_has("LLAMAFILE") else
            "this build has no llamafile") in err  # fmt: skip
    with pytest.warns(SpecparWarning) if library.build_has("LLAMAFILE") else warnings.catch_warnings():
        assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert "exact mode" in err and ("NOT exact" in err) == library.build_has("LLAMAFILE")


def test_no_exact_on_a_backend_without_modes_is_one_line(paths, capsys):
    from specpar.entrypoints import cli

    argv = ["generate", "x", "-N", "2", "--target", str(paths[0]), "--drafter", str(paths[1]), "--no-exact",
            "--backend", "transformers"]  # fmt: skip
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is llama.cpp's fast mode" in err[0]


def test_a_cancelled_draft_stops_between_passes_and_the_cache_stays_exact(pair):
    _, drafter = pair
    server = drafter.server("d")
    cancelled = threading.Event()
    cancelled.set()
    ctx = tuple(PROMPTS[1])
    greedy = Decoding(prompt_len=len(ctx))
    assert server.run(Draft(ctx, 5, greedy), cancelled) is None
    assert server.forwards == 1 and server.tokens == ctx[:-1]  # the prompt's canonical pass, not its last token's
    proposal = server.run(Draft(ctx, 5, greedy))
    assert proposal.tokens == reference_greedy(drafter, ctx, 5)
    assert server.tokens == ctx + tuple(proposal.tokens[:-1])  # the last draft is never fed


def test_draft_rows_are_the_drafters_processed_distributions(pair):
    _, drafter = pair
    ctx = tuple(PROMPTS[0])
    decoding = Decoding(0.8, 7)
    proposal = drafter.server("d").run(Draft(ctx, 3, decoding))
    rows = drafter.server("s").run(Score(ctx + tuple(proposal.tokens), 3, decoding)).rows
    assert np.array_equal(proposal.q, rows[:3])


def _logprobs_by_definition(model: LlamaModel, params: SamplingParams, prompt, tokens) -> list[float]:
    """Each token's log-probability from one-token rows: the log-softmax of the processed logits at its prefix (at
    the request's temperature)."""
    server, out, want = model.server("definition"), list(prompt), []
    proc, temperature = params.processors_for(len(prompt)), params.temperature
    for t in tokens:
        z = np.log(server.run(Score(tuple(out), 0, Decoding(1.0, 0))).rows)  # the logits up to a constant
        if proc is not None:
            z = proc.apply(z, out, len(out), temperature)
        elif temperature > 0:
            z = z / temperature
        want.append(float(log_softmax(z)[0, t]))
        out.append(t)
    server.close()
    return want


LOGPROB_CASES = {
    "greedy": dict(temperature=0),
    "greedy, penalized": dict(temperature=0, frequency_penalty=0.7),
    # sampled: the gumbel coupling draws the same tokens whatever the algorithm, so their rows compare bitwise too
    "sampled (gumbel), top-k": dict(temperature=0.8, seed=3, coupling="gumbel", top_k=4),
}


@pytest.mark.parametrize("case", sorted(LOGPROB_CASES))
def test_logprobs_are_the_one_token_rows_and_equal_non_si_for_every_algorithm(pair, case):
    target, drafter = pair
    prompt = PROMPTS[1]
    extra = LOGPROB_CASES[case]
    processed = case != "greedy"
    params = SamplingParams(max_tokens=12, logprobs=2, ignore_eos=True, **extra)
    with Engine(target, drafter, sp_degree=2) as engine:
        base = engine.generate(prompt, params, algorithm="nonsi")
        want = _logprobs_by_definition(target, params, prompt, base.tokens)
        assert np.allclose([x.logprob for x in base.logprobs], want, atol=1e-9)
        if params.temperature > 0:  # power: rows that ignored the temperature would not pass the check above
            at_one = _logprobs_by_definition(target, dataclasses.replace(params, temperature=1.0), prompt, base.tokens)
            assert not np.allclose([x.logprob for x in base.logprobs], at_one, atol=1e-9)
        runs = [("si", None), ("dsi", None)] + ([] if processed else [("si", (2, 2, 1)), ("dsi", "best:6")])
        for algorithm, tree in runs:  # trees take no processors
            r = engine.generate(prompt, params, algorithm=algorithm, lookahead=3, tree=tree)
            assert r.tokens == base.tokens and r.logprobs == base.logprobs, (algorithm, tree)  # bitwise


def test_logprob_rows_that_skip_the_processors_are_caught(pair, monkeypatch):
    raw = llama_server.rows
    monkeypatch.setattr(llama_server, "rows", lambda z, c, s, d: raw(z, c, s, dataclasses.replace(d, processors=None)))
    target, drafter = pair
    params = SamplingParams(temperature=0, max_tokens=12, logprobs=0, ignore_eos=True, frequency_penalty=0.7)
    with Engine(target, drafter, sp_degree=2) as engine:
        r = engine.generate(PROMPTS[1], params, algorithm="dsi", lookahead=3)
    want = _logprobs_by_definition(target, params, PROMPTS[1], r.tokens)
    assert not np.allclose([x.logprob for x in r.logprobs], want, atol=1e-9)


def test_a_forward_pass_releases_the_gil(pair):
    """While one thread runs a long pass in llama.cpp, Python code on another thread keeps running."""
    target, _ = pair
    server = target.server("long")
    ticks, done = [0], threading.Event()

    def count():
        while not done.is_set():
            ticks[0] += 1

    counter = threading.Thread(target=count)
    counter.start()
    try:
        passes = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.3:
            server.reset()
            before = ticks[0]
            server.run(Score(tuple(range(250)), 0, Decoding()))  # 4 passes of up to 63 tokens, about 10 ms
            passes += ticks[0] > before
    finally:
        done.set()
        counter.join()
    assert ticks[0] > 1000 and passes > 0


def test_servers_of_one_model_share_its_weights_and_keep_their_own_caches(pair, paths):
    target, _ = pair
    a, b = target.servers(2, prefix="t")
    again = LlamaModel(paths[0])  # another model object over the same file: the same loaded weights
    assert a.model.weights is b.model.weights is again.weights
    a.run(Score((1, 2, 3), 0, Decoding()))
    assert a.tokens == (1, 2, 3) and b.tokens == () and b.cached_len((1, 2, 3)) == 0


def test_the_tokenizer_round_trips_text_and_renders_the_chat_template(pair):
    target, _ = pair
    text = "def fib(n):\n    return n if n < 2 else fib(n - 1)  # é"
    ids = target.encode(text)
    assert target.decode(ids) == text
    assert target.encode("<|im_end|>") == [target.tokenizer.eos_token_id]  # special tokens parse in text
    assert target.decode(ids + [target.tokenizer.eos_token_id]) == text  # and are skipped in output
    assert set(end_of_text_ids(target)) == {259, 261}  # <|endoftext|> and <|im_end|> (after 256 bytes, 3 merges)
    chat = target.chat_prompt(["hi"])
    assert target.tokenizer.decode(chat, skip_special_tokens=False) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_an_engine_given_gguf_paths_loads_them_on_llama_cpp(paths):
    with Engine(str(paths[0]), str(paths[1]), sp_degree=2) as engine:
        assert type(engine.target_model) is LlamaModel and engine.runtime == "threads"
        result = engine.generate("def fib(n):", max_tokens=8, temperature=0, ignore_eos=True)
        assert result.tokens == reference_greedy(engine.target_model, engine.target_model.encode("def fib(n):"), 8)
        assert result.text == engine.target_model.decode(result.tokens)


def test_the_backend_is_llama_for_gguf_files_and_the_choice_is_checked(paths, monkeypatch):
    t, d = str(paths[0]), str(paths[1])
    assert choose_backend(None, t, d, ["cpu"]) == "llama"
    assert choose_backend("transformers", t, d, ["cpu"]) == "transformers"
    assert choose_backend(None, "dir_a", "dir_b", None) == "transformers"
    with pytest.raises(ConfigError, match="one format"):
        choose_backend(None, t, "dir_b", None)
    with pytest.raises(ConfigError, match="CPU"):
        choose_backend("llama", t, d, ["cuda:0"])
    with pytest.raises(ConfigError, match="backend must be one of"):
        choose_backend("vllm", t, d, None)
    monkeypatch.setattr(library, "available", lambda: False)
    monkeypatch.setattr("specpar.backends.llama.available", lambda: False)
    with pytest.raises(ConfigError, match=r"pip install 'specpar\[llama\]'"):
        choose_backend(None, t, d, None)


# -- bad input: one clear error each ------------------------------------------------------------------------------
def test_a_missing_file_a_directory_and_a_foreign_file_are_named(tmp_path):
    with pytest.raises(ConfigError, match="no GGUF file at"):
        LlamaModel(tmp_path / "nope.gguf")
    with pytest.raises(ConfigError, match="is not a file"):
        LlamaModel(tmp_path)
    foreign = tmp_path / "model.gguf"
    foreign.write_bytes(b"PK\x03\x04 a zip, not a model")
    with pytest.raises(ConfigError, match="is not a GGUF file"):
        LlamaModel(foreign)


@pytest.mark.parametrize("cut", [100, 400_000, 871_000])
def test_a_truncated_file_is_named_as_such(tmp_path, cut):
    path = write_tiny_gguf(tmp_path / "cut.gguf", truncate=cut)
    with pytest.raises(ConfigError, match="cut short|truncated"):
        LlamaModel(path)


def test_an_architecture_llama_cpp_cannot_load_is_refused_with_its_reason(tmp_path):
    path = write_tiny_gguf(tmp_path / "odd.gguf", arch="nosucharch")
    with pytest.raises(ConfigError, match="llama.cpp cannot load.*nosucharch"):
        LlamaModel(path)


def test_a_drafter_with_another_vocabulary_is_refused(pair, tmp_path):
    target, _ = pair
    other = LlamaModel(write_tiny_gguf(tmp_path / "v9.gguf", vocab=9))
    with pytest.raises(ConfigError, match="must share one tokenizer"):
        check_same_vocabulary(target, other)
    with pytest.raises(ConfigError, match="must share one tokenizer"):
        Engine(str(target.path), str(other.path))


@pytest.mark.parametrize(
    "drafter,needle",
    [
        (dict(swapped=True), "tokenizers of target t.gguf and drafter d.gguf differ"),
        (dict(padding=5), "267 token ids and target t.gguf 262, the same tokens below 262: their rows differ only by"),
        (dict(vocab=9), "tokenizers of target t.gguf and drafter d.gguf differ"),
    ],
)
def test_a_drafter_file_with_another_tokenizer_is_refused_before_any_weights_load(tmp_path, monkeypatch, drafter,
                                                                                   needle):  # fmt: skip
    target = write_tiny_gguf(tmp_path / "t.gguf")
    other = write_tiny_gguf(tmp_path / "d.gguf", **drafter)
    loaded = []
    monkeypatch.setattr(llama_model, "_load_weights", lambda path, repack: loaded.append(path))
    with pytest.raises(ConfigError, match="must share one tokenizer") as refused:
        Engine(str(target), str(other), backend="llama")
    assert needle in str(refused.value) and loaded == []


def test_the_header_check_passes_one_tokenizer_and_tokenless_files_of_one_size(tmp_path):
    """The control: the same tokenizer (weights that differ) and two tokenless files of one size pass; two tokenless
    files of different sizes do not."""
    check_same_tokenizer_files(write_tiny_gguf(tmp_path / "a.gguf"), write_tiny_gguf(tmp_path / "b.gguf", noise=0.1))
    nine, other_nine = write_tiny_gguf(tmp_path / "n.gguf", vocab=9), write_tiny_gguf(tmp_path / "m.gguf", vocab=9)
    check_same_tokenizer_files(nine, other_nine)
    with pytest.raises(ConfigError, match="has 12 token ids but target n.gguf has 9"):
        check_same_tokenizer_files(nine, write_tiny_gguf(tmp_path / "twelve.gguf", vocab=12))


def test_the_backend_not_installed_names_the_install_command(monkeypatch):
    monkeypatch.setattr(library, "_lib", None)
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'specpar\[llama\]'"):
        library.lib()


def test_generate_on_gguf_files_gives_the_targets_tokens_and_says_it_is_exact(paths, capsys):
    import json

    from specpar.entrypoints import cli

    t, d = str(paths[0]), str(paths[1])
    argv = ["generate", "def fib(n):", "-k", "2", "-N", "6", "--ignore-eos", "--compare", "--json", "--target", t]
    assert cli.main(argv + ["--drafter", d, "-v"]) == 0
    out, err = capsys.readouterr()
    target = LlamaModel(t)
    expected = reference_greedy(target, target.encode("def fib(n):"), 6)
    assert {a: r["tokens"] for a, r in json.loads(out)["results"].items()} == dict.fromkeys(
        ("dsi", "nonsi", "si"), expected
    )
    assert "exact mode: flash attention on" in err and "bitwise exact" in err  # -v: the mode, the settings, the promise


def test_a_reset_waits_for_the_call_running_on_the_server_and_its_log_is_bounded(pair):
    """The lifecycle every cached server shares (backends/cached_server.py): reset() while a pass runs on another
    thread waits for the pass, then clears (a llama.cpp context cleared under a running decode is undefined);
    forward_log is the bounded ring. Control: the context's clear() alone does not wait."""
    server = pair[0].server("lifecycle")
    ctx, events = server._ctx, []
    decode, clear = ctx.decode, ctx.clear

    def slow_decode(*args, **kwargs):
        events.append("decode starts")
        time.sleep(0.3)
        out = decode(*args, **kwargs)
        events.append("decode ends")
        return out

    def logged_clear():
        events.append("clear")
        clear()

    ctx.decode, ctx.clear = slow_decode, logged_clear
    prompt = tuple(PROMPTS[0])
    for reset in (server.reset, logged_clear):  # the server's reset, then the control
        events.clear()
        call = threading.Thread(target=server.run, args=(Score(prompt, 0, Decoding()),))
        call.start()
        while not events:
            time.sleep(0.01)
        reset()
        call.join()
        order = events[:]
        if reset is logged_clear:
            assert order == ["decode starts", "clear", "decode ends"], order  # the control: a clear under the pass
        else:
            assert order == ["decode starts", "decode ends", "clear"], order
            assert server.tokens == ()
        server.tokens = ()
    assert type(server.forward_log).__name__ == "ForwardLog" and len(server.forward_log) == 2
    server.close()


_CHOOSE = (
    "import sys; from specpar.backends import loading; loading.GPU_DEVICE_FILES = {files!r}; "
    "print(loading.choose_backend(None, None, None, None), 'torch' in sys.modules)"
)


@pytest.mark.skipif(any(os.path.exists(f) for f in loading_module.GPU_DEVICE_FILES), reason="a GPU driver is present")
def test_the_default_pair_on_a_machine_without_a_gpu_driver_chooses_llama_without_importing_torch():
    run = lambda files: subprocess.run(  # noqa: E731
        [sys.executable, "-c", _CHOOSE.format(files=files)], capture_output=True, text=True, timeout=120, check=True
    ).stdout.split()
    assert run(loading_module.GPU_DEVICE_FILES) == ["llama", "False"]
    # control: where a driver's device file exists, torch is asked (and imported) whether it sees a GPU
    assert run(("/",)) == ["llama", "True"]


def test_the_llama_path_imports_neither_torch_nor_transformers(paths):
    """A GGUF pair on llama.cpp end to end from the command line (its tokenizer and chat template from the GGUF
    files), with every import of torch, transformers, accelerate, gguf and datasets refused: what '.[models]'
    installs is enough (issue 32, item 2). The control: the transformers backend on the same run needs them."""
    from blocked_imports import blocking
    from processes import run_python

    def cli(*argv):
        code = blocking() + f"from specpar.entrypoints.cli.main import main\nsys.exit(main({list(argv)!r}))\n"
        return run_python(code, timeout=300)

    models = ["--target", str(paths[0]), "--drafter", str(paths[1])]
    p = cli("generate", "def fib(n):", "--compare", "-N", "6", "--json", *models)
    assert p.returncode == 0 and "blocked import" not in p.stderr, p.stderr[-2000:]
    chat = cli("generate", "--chat", "hi", "-N", "4", *models)
    assert chat.returncode == 0, chat.stderr[-2000:]
    control = cli("generate", "hi", "-N", "2", "--backend", "transformers", *models)
    assert control.returncode != 0 and "blocked import of" in control.stderr + control.stdout


def test_generate_sizes_each_servers_cache_for_its_request(paths, monkeypatch, capsys):
    """The README's main job held 3 target and 3 drafter caches of 4,096 tokens (about 0.5 GB of its 2.53 GB peak,
    issue 32's goal 2.5 GB): generate now sizes them for its prompt, -N and the drafts ahead (llama.cpp pads to
    256 cells)."""
    from specpar.entrypoints import cli
    from specpar.entrypoints.cli import real_models

    made = []
    real = real_models.load

    def load(*a, **k):
        out = real(*a, **k)
        made.append(out[2])
        return out

    monkeypatch.setattr(real_models, "load", load)
    argv = ["generate", "def fib(n):", "--compare", "-N", "12", "--json", "--target", str(paths[0]), "--drafter",
            str(paths[1])]  # fmt: skip
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["results"]["dsi"]["tokens"] == out["results"]["nonsi"]["tokens"]
    caches = {s.n_ctx for s in made[0].all}
    assert caches == {256}, caches  # 4,096 before: the model's default
