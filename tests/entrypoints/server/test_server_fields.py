"""specpar serve: the OpenAI fields users send, through the official ``openai`` client against a live server of
simulated models (and raw HTTP where a client would not send the body), each equal to the engine's own call."""

from __future__ import annotations

import json
import socket
import threading

import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

from served import KEY, client, post, running, simulated_engine  # noqa: E402
from specpar import SamplingParams  # noqa: E402
from specpar.entrypoints.server.app import create_app  # noqa: E402


def raw_stream(url: str, body: dict) -> tuple[int, bytes]:
    """(status, the whole response body) of a streamed completions request over a raw socket."""
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Connection: close\r\nAuthorization: Bearer {KEY}\r\nContent-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        with sock.makefile("rb") as f:
            status = int(f.readline().split()[1])
            return status, f.read()


@pytest.fixture(scope="module")
def sim():
    engine = simulated_engine()
    with running(create_app(engine, "sim", api_key="sk-test", max_model_len=2048)) as url:
        yield url, engine


def ids(text: str) -> list[int]:
    return [int(t) for t in text.split()]


def test_a_request_without_a_seed_is_fresh_and_a_seed_reproduces_for_every_algorithm(sim):
    url, _ = sim
    c = client(url)
    kw = dict(model="sim", prompt=[1, 2], max_tokens=20, temperature=1.0)
    unseeded = {c.completions.create(**kw).choices[0].text for _ in range(3)}
    assert len(unseeded) == 3  # 32^20 outcomes: equal texts would mean a shared seed
    seeded = {
        c.completions.create(**kw, seed=7, extra_body={"speculative": {"algorithm": a}}).choices[0].text
        for a in ("nonsi", "si", "dsi", "dsi")
    }
    assert len(seeded) == 1  # the Gumbel coupling: a seed gives non-SI's tokens whatever the algorithm
    chat = c.chat.completions.create(model="sim", messages=[{"role": "user", "content": "1 2"}], max_tokens=20,
                                     temperature=1.0, seed=7)  # fmt: skip
    assert chat.choices[0].message.content == seeded.pop()


def test_n_samples_are_independent_and_each_reproducible(sim):
    url, engine = sim
    c = client(url)
    r = c.completions.create(model="sim", prompt=[3], max_tokens=15, temperature=1.0, n=3, seed=11)
    texts = [ch.text for ch in sorted(r.choices, key=lambda ch: ch.index)]
    assert [ch.index for ch in r.choices] == [0, 1, 2] and len(set(texts)) == 3
    for j, text in enumerate(texts):  # sample j: seed + j, as one request with that seed
        want = engine.generate([3], SamplingParams(max_tokens=15, seed=11 + j, coupling="gumbel"))
        assert ids(text) == want.tokens
    assert r.usage.prompt_tokens == 1 and r.usage.completion_tokens == 45


def test_prompt_lists_and_echo(sim):
    url, engine = sim
    c = client(url)
    r = c.completions.create(model="sim", prompt=[[4, 5], [6]], max_tokens=5, temperature=0, n=2, echo=True)
    by_index = {ch.index: ch.text for ch in r.choices}
    assert c.completions.create(model="sim", prompt="4  5", max_tokens=1, echo=True).choices[0].text.startswith("4  5")
    for i, (prompt, echoed) in enumerate([([4, 5], " 4 5"), ([6], " 6")]):  # ids echo as id text (text as given)
        want = echoed + "".join(f" {t}" for t in engine.generate(prompt, temperature=0, max_tokens=5).tokens)
        assert by_index[2 * i] == by_index[2 * i + 1] == want
    chunks = list(c.completions.create(model="sim", prompt=[[7], [8]], max_tokens=4, temperature=0, stream=True))
    for i, prompt in enumerate([[7], [8]]):
        text = "".join(ch.choices[0].text for ch in chunks if ch.choices and ch.choices[0].index == i)
        assert ids(text) == engine.generate(prompt, temperature=0, max_tokens=4).tokens
    assert r.usage.prompt_tokens == 3


def test_processors_over_http_equal_the_engines(sim):
    url, engine = sim
    c = client(url)
    fields = dict(presence_penalty=1.2, frequency_penalty=0.5, logit_bias={"3": 4.0, "5": -2.0})
    extra = {"min_tokens": 6, "stop_token_ids": [3], "repetition_penalty": 1.3, "top_k": -1}
    r = c.completions.create(model="sim", prompt=[9, 9], max_tokens=30, temperature=0, extra_body=extra, **fields)
    want = engine.generate([9, 9], SamplingParams(temperature=0, max_tokens=30, presence_penalty=1.2,
                                                  frequency_penalty=0.5, logit_bias={3: 4.0, 5: -2.0}, min_tokens=6,
                                                  stop_token_ids=[3], repetition_penalty=1.3))  # fmt: skip
    assert ids(r.choices[0].text) == want.tokens and r.choices[0].finish_reason == want.finish_reason
    plain = engine.generate([9, 9], SamplingParams(temperature=0, max_tokens=30))
    assert want.tokens != plain.tokens  # the fields mattered


def test_logprobs_are_non_si_logprobs(sim):
    url, engine = sim
    c = client(url)
    base = engine.generate([2, 4], SamplingParams(temperature=0, max_tokens=12, logprobs=3), algorithm="nonsi")
    r = c.completions.create(model="sim", prompt=[2, 4], max_tokens=12, temperature=0, logprobs=3)  # DSI
    lp = r.choices[0].logprobs
    assert lp.token_logprobs == [x.logprob for x in base.logprobs]
    assert lp.tokens == [f" {x.token}" for x in base.logprobs]
    assert [list(d.values()) for d in lp.top_logprobs] == [[v for _, v in x.top] for x in base.logprobs]
    assert lp.text_offset == [3 * i for i in range(12)] or lp.text_offset[0] == 0
    chat = c.chat.completions.create(model="sim", messages=[{"role": "user", "content": "2 4"}], max_tokens=12,
                                     temperature=0, logprobs=True, top_logprobs=2)  # fmt: skip
    content = chat.choices[0].logprobs.content
    assert [x.logprob for x in content] == [x.logprob for x in base.logprobs]
    assert [[t.logprob for t in x.top_logprobs] for x in content] == [[v for _, v in x.top[:2]] for x in base.logprobs]
    streamed = list(c.completions.create(model="sim", prompt=[2, 4], max_tokens=12, temperature=0, logprobs=1,
                                         stream=True))  # fmt: skip
    got = [v for ch in streamed if ch.choices[0].logprobs for v in ch.choices[0].logprobs.token_logprobs]
    assert got == [x.logprob for x in base.logprobs]


def test_tokenize_detokenize_version(sim):
    url, _ = sim
    assert post(url, "/tokenize", {"prompt": "1 2 3"}) == (
        200,
        {"count": 3, "max_model_len": 2048, "tokens": [1, 2, 3]},
    )
    assert post(url, "/tokenize", {"messages": [{"role": "user", "content": "4"}]})[1]["tokens"] == [4]
    assert post(url, "/detokenize", {"tokens": [5, 6]}) == (200, {"prompt": " 5 6"})
    assert post(url, "/detokenize", {"tokens": [99]})[1]["error"]["param"] == "tokens"
    assert post(url, "/tokenize", {"prompt": "1"}, key=None)[0] == 401
    import http.client

    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("GET", "/version")
    assert conn.getresponse().read() == b'{"version":"0.1.0"}'


@pytest.mark.slow
def test_fifty_streams_against_max_queue_8_serve_8_and_refuse_the_rest():
    with simulated_engine() as engine, running(create_app(engine, "sim", max_queue=8)) as url:
        want = engine.generate([5], temperature=0, max_tokens=300).tokens
        barrier, outcome, lock = threading.Barrier(50), [], threading.Lock()

        def one():
            barrier.wait()
            status, text = raw_stream(url, {"prompt": [5], "max_tokens": 300, "temperature": 0, "stream": True})
            with lock:
                outcome.append(("served" if status == 200 else status, text))

        threads = [threading.Thread(target=one) for _ in range(50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        served = [text for kind, text in outcome if kind == "served"]
        assert len(outcome) == 50 and len(served) == 8, [kind for kind, _ in outcome]
        assert all(kind == 429 and b"queue_full" in text for kind, text in outcome if kind != "served")
        for text in served:
            events = [json.loads(line[6:]) for line in text.split(b"\n") if line.startswith(b"data: {")]
            assert ids("".join(e["choices"][0]["text"] for e in events if e["choices"])) == want
        r = client(url, "x").completions.create(model="sim", prompt=[5], max_tokens=300, temperature=0)
        assert ids(r.choices[0].text) == want


def test_per_request_speculation(sim):
    url, engine = sim
    want = engine.generate([6, 1], SamplingParams(temperature=0, max_tokens=20)).tokens
    for spec in ({"algorithm": "si", "lookahead": 2}, {"algorithm": "dsi", "sp_degree": 1}, {"algorithm": "nonsi"}):
        status, body = post(url, "/v1/completions", {"prompt": [6, 1], "max_tokens": 20, "temperature": 0,
                                                     "speculative": spec})  # fmt: skip
        assert status == 200 and ids(body["choices"][0]["text"]) == want, spec
    status, body = post(url, "/v1/completions", {"prompt": [6, 1], "speculative": {"algorithm": "hsd"}})
    assert status == 400 and body["error"]["param"] == "speculative"


def test_a_server_started_with_a_tree_serves_a_non_si_request():
    """`specpar serve --tree 2,2,1` answered every {"speculative": {"algorithm": "nonsi"}} with a 400 ("token trees
    work with algorithm 'si' or 'dsi'"): the request now leaves the server's tree behind."""
    from specpar import Engine, LatencyProfile, SimulatedModel

    target = SimulatedModel(32, seed=0, latency=LatencyProfile.uniform(1.0))
    engine = Engine(target, target.drafter(0.8, LatencyProfile.uniform(0.1)), sp_degree=2, tree=(2, 2, 1))
    with running(create_app(engine, "sim")) as url:
        body = {"prompt": [1, 2], "max_tokens": 8, "temperature": 0}
        status, reply = post(url, "/v1/completions", {**body, "speculative": {"algorithm": "nonsi"}}, key=None)
        assert status == 200 and reply["choices"][0]["token_ids"] == target.greedy_tokens([1, 2], 8)
        status, reply = post(url, "/v1/completions", body, key=None)  # the server's tree, for DSI
        assert status == 200 and reply["choices"][0]["token_ids"] == target.greedy_tokens([1, 2], 8)


@pytest.mark.slow
def test_logprobs_of_byte_tokens_are_keyed_by_the_token_not_its_text(tmp_path):
    """A byte-level GGUF tokenizer (GPT-2's 256 byte tokens): five continuation bytes 0x80-0x84 pushed to the top by
    logit_bias each decode alone to U+FFFD. Before: completions' top_logprobs collapsed them to one key (5 asked, 1
    back) and the chosen token's logprob was read under another token's key; chat's bytes were U+FFFD's
    (239, 191, 189). Now each is named as OpenAI names such tokens, "bytes:\\x80", with its own bytes."""
    pytest.importorskip("gguf")
    from specpar import Engine
    from tiny_gguf import write_tiny_gguf

    paths = [write_tiny_gguf(tmp_path / f"{n}.gguf", noise=0.01 * i) for i, n in enumerate(("t", "d"))]
    bias = {str(b): 50 for b in range(0x80, 0x85)}
    with Engine(str(paths[0]), str(paths[1]), backend="llama", sp_degree=1) as engine:
        with running(create_app(engine, "tiny", max_model_len=512)) as url:
            body = {"prompt": "def fib(n):", "max_tokens": 2, "temperature": 0, "logprobs": 5, "logit_bias": bias}
            status, out = post(url, "/v1/completions", body, key=None)
            assert status == 200, out
            lp = out["choices"][0]["logprobs"]
            top = lp["top_logprobs"][0]
            assert set(top) == {f"bytes:\\x{b:02x}" for b in range(0x80, 0x85)}, top  # five distinct keys
            chosen = lp["tokens"][0]
            assert chosen == f"bytes:\\x{out['choices'][0]['token_ids'][0]:02x}"
            assert lp["token_logprobs"][0] == top[chosen] == max(top.values())  # greedy: its own, the largest
            chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "temperature": 0,
                    "logprobs": True, "top_logprobs": 5, "logit_bias": bias}  # fmt: skip
            status, out = post(url, "/v1/chat/completions", chat, key=None)
            assert status == 200, out
            first = out["choices"][0]["logprobs"]["content"][0]
            assert sorted(e["bytes"] for e in first["top_logprobs"]) == [[b] for b in range(0x80, 0x85)]
            assert all(e["token"] == f"bytes:\\x{e['bytes'][0]:02x}" for e in first["top_logprobs"])
            assert first["bytes"] == [out["choices"][0]["token_ids"][0]]  # its own byte, not U+FFFD's 239, 191, 189
        # what collapsed them: decoded alone each is U+FFFD; the control: a whole character keeps its text and bytes
        from specpar.entrypoints.server.served import Served

        assert {engine.tokenizer.decode([b]) for b in range(0x80, 0x85)} == {"\ufffd"}
        served = Served(engine)
        assert (served.token(0x61), served.token_bytes(0x61)) == ("a", b"a")
