"""The Ray runtime gives the target's own tokens (greedy) and distribution (sampling): every server an actor.

One Ray for the session (conftest's ``ray_local``: 3 raylets on this machine, as 3 nodes); the servers of a module are ready-made pools whose actors
are kept between generations, as an engine keeps them, so that 20 configurations cost 7 actors, not 80.
"""

from __future__ import annotations

import functools
import itertools
import random
from collections import Counter

import pytest

from conftest import RAY_OPTIONS
from specpar import LatencyProfile, SimulatedModel, generate
from specpar.runtimes import Pool, RayRuntime
from stats import chi_square_p_value

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_local"), pytest.mark.timeout(120)]

ACCEPTANCE = (0.0, 0.6, 0.95)


@pytest.fixture(scope="module")
def sim_pools():
    """A simulated target (prefill 2 ms, pass 1 ms, 0.1 ms per extra token) on 4 servers, and one drafter server
    per acceptance rate; their actors live for the module."""
    from specpar.runtimes.ray_actors import release_kept

    target = SimulatedModel(16, seed=7, latency=LatencyProfile(2.0, 1.0, 0.1))
    targets = Pool([target.server(f"target{i}") for i in range(4)], "target")
    drafters = {
        a: Pool([target.drafter(a, LatencyProfile.uniform(0.1), seed=3).server("drafter")], "drafter")
        for a in ACCEPTANCE
    }
    RayRuntime([targets, *drafters.values()], reuse_actors=True, **RAY_OPTIONS).close()  # all 7 actors at once
    yield target, targets, drafters
    release_kept(targets.servers + [p.servers[0] for p in drafters.values()])


# (algorithm, acceptance rate, lookahead, sp_degree, extra generate() arguments): 2 + 6 + 12 = 20 configurations
CONFIGS = (
    [("nonsi", 0.0, None, 1, {}), ("nonsi", 0.0, None, 1, {"max_tokens": 5})]
    + [("si", a, k, 1, {}) for a, k in itertools.product(ACCEPTANCE, (1, 4))]
    + [
        ("dsi", a, k, sp, {"prefill_replicas": sp == 4, "dedicated_cursor": k == 3})
        for a, k, sp in itertools.product(ACCEPTANCE, (1, 3), (2, 4))
    ]
)


@pytest.mark.parametrize("i", range(len(CONFIGS)))
def test_greedy_output_is_the_targets_own_on_ray(sim_pools, i):
    algorithm, a, k, sp, extra = CONFIGS[i]
    target, targets, drafters = sim_pools
    prompt = [random.Random(i).randrange(16) for _ in range(4 + i % 5)]
    kw = {"max_tokens": 20, **extra}
    placement = {"local_pools": ()} if i % 2 else {}  # the drafter in an actor, or in the driver (the default)
    out = generate(
        prompt,
        targets,
        drafters[a],
        algorithm=algorithm,
        lookahead=k,
        sp_degree=sp,
        runtime="ray",
        runtime_options={**RAY_OPTIONS, **placement},
        **kw,
    )
    assert out.runtime == "ray"
    assert out.tokens == target.greedy_tokens(prompt, kw["max_tokens"])
    assert out.replicas_lost == () and out.time_lost_ms == 0.0


def test_a_second_generation_on_the_same_servers_reuses_their_actors(sim_pools):
    import ray

    from specpar.runtimes.ray_actors import kept

    target, targets, drafters = sim_pools
    session = ray.get_runtime_context().get_node_id()
    before = [kept(s, session).actor._actor_id for s in targets.servers]
    for prompt in ([1, 2, 3], [4, 5]):
        out = generate(
            prompt,
            targets,
            drafters[0.6],
            algorithm="dsi",
            sp_degree=4,
            max_tokens=8,
            runtime="ray",
            runtime_options=RAY_OPTIONS,
        )
        assert out.tokens == target.greedy_tokens(prompt, 8)
    assert [kept(s, session).actor._actor_id for s in targets.servers] == before


V, N, PROMPT, SAMPLES = 4, 2, [0, 1], 200


def test_sampling_on_ray_follows_the_targets_distribution():
    """DSI (lookahead 1, two target actors) at temperature 1: chi-square against the target's exact joint of the
    first two tokens; the same samples reject the drafter's own joint (the test can fail). SI's samples are the
    very ones the virtual clock draws for their seeds (position-keyed randomness; DSI's depend on which task's
    row judges a draft, so on timing, not on the distribution)."""
    from specpar.runtimes.ray_actors import release_kept

    target = SimulatedModel(V, seed=21, latency=LatencyProfile.uniform(0.2), spread=1.5)
    drafter = SimulatedModel(V, seed=99, latency=LatencyProfile.uniform(0.05), spread=1.5)  # an unrelated model
    targets, drafters = Pool([target.server(f"t{i}") for i in range(2)], "target"), Pool([drafter.server()], "d")
    run = functools.partial(generate, PROMPT, algorithm="dsi", max_tokens=N, lookahead=1, sp_degree=2, temperature=1.0)
    try:
        samples = [
            tuple(run(targets, drafters, seed=s, runtime="ray", runtime_options=RAY_OPTIONS).tokens)
            for s in range(SAMPLES)
        ]
        si = [
            run(targets, drafters, seed=s, algorithm="si", runtime="ray", runtime_options=RAY_OPTIONS)
            for s in range(10)
        ]
    finally:
        release_kept(targets.servers + drafters.servers)
    assert [x.tokens for x in si] == [run(target, drafter, seed=s, algorithm="si").tokens for s in range(10)]
    joint = {
        seq: m.sequence_probability(PROMPT, seq) for m in (target,) for seq in itertools.product(range(V), repeat=N)
    }
    drafter_joint = {seq: drafter.sequence_probability(PROMPT, seq) for seq in itertools.product(range(V), repeat=N)}
    assert chi_square_p_value(Counter(samples), joint) > 1e-3
    assert chi_square_p_value(Counter(samples), drafter_joint) < 1e-6


@pytest.fixture(scope="module")
def tiny_pools():
    """Tiny random transformers models: a target server in an actor that builds its own copy of the model from the
    seeds (tests/tiny_transformers.py, pickled by value: workers cannot import the tests), and a drafter server
    in the driver (the default). One actor: each imports torch and transformers, seconds on a busy 2-core
    machine."""
    pytest.importorskip("torch")
    import ray.cloudpickle

    import tiny_transformers
    from specpar.runtimes.ray_actors import release_kept

    ray.cloudpickle.register_pickle_by_value(tiny_transformers)
    target, drafter = tiny_transformers.tiny_model("target"), tiny_transformers.tiny_model("drafter")
    targets, drafters = Pool([target.server("target0")], "target"), Pool([drafter.server("drafter")], "drafter")
    RayRuntime([targets], reuse_actors=True, **RAY_OPTIONS).close()
    yield target, targets, drafters
    release_kept(targets.servers + drafters.servers)


@pytest.mark.parametrize("algorithm,lookahead", [("dsi", 2), ("si", 3), ("nonsi", None)])
def test_transformers_servers_on_ray_give_the_targets_own_tokens(tiny_pools, algorithm, lookahead):
    from tiny_transformers import reference_greedy

    target, targets, drafters = tiny_pools
    prompt = [5, 9, 2, 33, 17]
    out = generate(
        prompt,
        targets,
        drafters,
        algorithm=algorithm,
        lookahead=lookahead,
        sp_degree=1,  # DSI still overlaps drafting with verification
        max_tokens=16,
        runtime="ray",
        runtime_options=RAY_OPTIONS,
    )
    assert out.tokens == reference_greedy(target, prompt, 16)


def test_servers_spread_over_three_raylets_give_the_targets_own_tokens():
    """Placement SPREAD on the session's 3 raylets: 3 target replicas and the drafter (an actor too) run on 3
    distinct nodes, and non-SI, SI and DSI there give the target's own tokens."""
    import ray

    from specpar.runtimes.ray_actors import kept, release_kept

    assert len([n for n in ray.nodes() if n["Alive"]]) == 3
    target = SimulatedModel(16, seed=11, latency=LatencyProfile(2.0, 1.0, 0.1))
    targets = Pool([target.server(f"target{i}") for i in range(3)], "target")
    drafters = Pool([target.drafter(0.7, LatencyProfile.uniform(0.2), seed=5).server("drafter")], "drafter")
    options = {**RAY_OPTIONS, "placement": "SPREAD", "local_pools": ()}
    servers = targets.servers + drafters.servers
    try:
        RayRuntime([targets, drafters], reuse_actors=True, **options).close()
        session = ray.get_runtime_context().get_node_id()
        where = {s.name: ray.get(kept(s, session).actor.stats.remote())["node"] for s in servers}
        assert len(set(where.values())) == 3, f"SPREAD used {len(set(where.values()))} of 3 nodes: {where}"
        prompt = [3, 1, 4, 1, 5]
        for algorithm, k, sp in (("nonsi", None, 1), ("si", 4, 1), ("dsi", 3, 3)):
            out = generate(
                prompt,
                targets,
                drafters,
                algorithm=algorithm,
                lookahead=k,
                sp_degree=sp,
                max_tokens=24,
                runtime="ray",
                runtime_options=options,
            )
            assert out.tokens == target.greedy_tokens(prompt, 24), algorithm
        assert {s.name: ray.get(kept(s, session).actor.stats.remote())["node"] for s in servers} == where
    finally:
        release_kept(servers)
