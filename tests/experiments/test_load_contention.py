"""The load simulation on a machine with contention (experiments/load.py's LoadSetting.contention, a machine
profile's): requests running at once slow each other as the profile says; without it every unit has its own
hardware (the paper's clock)."""

from __future__ import annotations

import pytest

from specpar.core.latency import LatencyProfile
from specpar.experiments.load import LoadSetting, LoadSimulation


def throughput(contention, clients: int) -> float:
    setting = LoadSetting(units=2, target=LatencyProfile.uniform(10.0), drafter=LatencyProfile.uniform(1.0),
                          max_tokens=20, lookahead=3, contention=contention)  # fmt: skip
    return LoadSimulation(setting).run("nonsi", clients=clients, requests=4).throughput


def test_two_requests_at_once_share_the_machine_as_its_contention_says():
    alone = throughput(None, 1)
    assert throughput(None, 2) == pytest.approx(2 * alone)  # the control: each unit its own hardware
    assert throughput((1.0, 2.0), 2) == pytest.approx(alone)  # one core for two: no gain
    assert throughput((1.0, 1.25), 2) == pytest.approx(2 * alone / 1.25)
    assert throughput((1.0, 2.0), 1) == pytest.approx(alone)  # one request alone is never slowed
