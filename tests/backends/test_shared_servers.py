"""A Pool (its servers, their caches) belongs to one generation at a time: a second generation on servers that an
open runtime still holds is a ConfigError naming the server, never tokens computed on a cache another generation
is changing (before: silently wrong tokens, 25 of 160 SI runs from several threads on the virtual clock)."""

from __future__ import annotations

import sys
import threading

import pytest

from conftest import make_pair
from specpar import ConfigError, generate
from specpar.runtimes import Pool, ThreadRuntime, VirtualRuntime


@pytest.mark.parametrize("runtime", [VirtualRuntime, ThreadRuntime])
def test_a_second_runtime_on_servers_an_open_runtime_holds_is_refused_and_they_are_free_after_close(runtime):
    target, _ = make_pair()
    pool = Pool([target.server("t0"), target.server("t1")], "target")
    first = runtime([pool])
    with pytest.raises(ConfigError, match=r"server 't0' is already running another generation .*one Engine"):
        runtime([Pool(pool.servers[:1], "target")])
    first.close()
    runtime([pool]).close()  # closed: the servers are free again


@pytest.mark.parametrize("algorithm", ["si", "dsi"])
@pytest.mark.parametrize("runtime", ["virtual", "threads"])
def test_generations_sharing_pools_from_several_threads_each_get_the_right_tokens_or_a_clear_error(algorithm, runtime):
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch as often as they can: the caches' updates interleave
    target, drafter = make_pair(a=0.7, vocab=16, target_ms=0.2)
    targets = Pool([target.server(f"t{i}") for i in range(4)], "target")
    drafters = Pool([drafter.server("d")], "drafter")
    expected = target.greedy_tokens([1, 2], 100)
    outcomes = []

    def work():
        for _ in range(5):
            try:
                out = generate([1, 2], targets, drafters, algorithm=algorithm, max_tokens=100, runtime=runtime)
                outcomes.append(out.tokens == expected)
            except ConfigError as exc:
                outcomes.append("already running another generation" in str(exc))

    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(switch)
    assert len(outcomes) == 20 and all(outcomes), outcomes
