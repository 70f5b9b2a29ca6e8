"""Contention on the virtual clock (runtimes/virtual.py Contention): while n servers are busy each pass runs f(n)
times slower (processor sharing); without contention the clock is the paper's (benchmarks/dsi_equivalence.py checks
that bit for bit over 10,000 configurations)."""

from __future__ import annotations

import pytest

from specpar.core.errors import ConfigError
from specpar.runtimes import Pool, RuntimeConfig, make_runtime
from specpar.runtimes.shared_clock import SharedClock
from specpar.runtimes.virtual import VirtualRuntime


class Timed:
    """A server whose call is its own duration in ms."""

    def __init__(self, name: str):
        self.name = name

    def cached_len(self, context) -> int:
        return 0

    def duration_ms(self, call) -> float:
        return call.ms

    def compute(self, call):
        return call.ms


class Call:
    kind = "verify"
    context = ()

    def __init__(self, ms: float):
        self.ms = ms


def pools(n: int) -> list[Pool]:
    return [Pool([Timed(f"s{i}")], f"p{i}") for i in range(n)]


def ends(rt, ps, durations) -> list[float]:
    tasks = [rt.submit(p, Call(ms)) for p, ms in zip(ps, durations)]
    for _ in tasks:
        rt.wait()
    return [t.end for t in tasks]


def test_two_busy_servers_share_the_machine():
    ps = pools(2)
    # f(2) = 2: both run at half speed until the short one ends at 20, then the long one at full speed: 20 + 20
    assert ends(VirtualRuntime(ps, contention=(1.0, 2.0)), ps, [10.0, 30.0]) == [20.0, 40.0]
    assert ends(VirtualRuntime(ps), ps, [10.0, 30.0]) == [10.0, 30.0]  # control: no contention


def test_a_cancelled_pass_that_frees_its_server_speeds_the_others_up():
    ps = pools(2)
    rt = VirtualRuntime(ps, contention=(1.0, 2.0))
    long, short = rt.submit(ps[0], Call(30.0)), rt.submit(ps[1], Call(10.0))
    assert rt.wait() is short and short.end == 20.0  # 10 ms of work at half speed
    assert long.end == 40.0
    ps = pools(2)
    rt = VirtualRuntime(ps, contention=(1.0, 2.0))
    long, other = rt.submit(ps[0], Call(30.0)), rt.submit(ps[1], Call(100.0))
    rt.cancel(other)  # at time 0: the long pass never shared the machine
    assert rt.wait() is long and long.end == 30.0


def test_past_the_measured_factors_the_slowdown_grows_with_the_servers():
    ps = pools(4)
    assert ends(VirtualRuntime(ps, contention=(1.0, 1.5)), ps, [12.0] * 4) == [36.0] * 4  # f(4) = 1.5 * 4 / 2


def test_generations_on_one_shared_clock_slow_each_other():
    clock, done = SharedClock(), {}
    config = RuntimeConfig(name="virtual", options={"clock": clock, "contention": (1.0, 2.0)})

    def one(name: str, ms: float) -> None:
        ps = [Pool([Timed(name)], name)]
        rt = make_runtime(config, ps)
        done[name] = ends(rt, ps, [ms])[0]

    clock.spawn(one, "a", 10.0)
    clock.spawn(one, "b", 30.0)
    clock.run()
    assert done == {"a": 20.0, "b": 40.0}


@pytest.mark.parametrize("bad", [(2.0,), (1.0, 0.5), (), "1,2"])
def test_bad_factors_are_one_clear_error(bad):
    with pytest.raises(ConfigError, match="contention"):
        VirtualRuntime(pools(1), contention=bad)
