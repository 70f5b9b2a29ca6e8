"""What travels to a Ray actor (no Ray needed): only the verified tokens it has not seen, plus the drafts; the
actor rebuilds every call's context exactly, and its server answers as the same server would locally."""

import pytest

from specpar import LatencyProfile, SimulatedModel
from specpar.core.calls import Context, Draft, Score
from specpar.core.decoding import GREEDY
from specpar.runtimes.ray_actors import RemoteServer, ServerHost

pytestmark = pytest.mark.slow  # (pytest -m 'not slow' leaves it out: the fast inner loop)


class Recorder:
    """Stands in for an actor handle: ``run.remote(message)`` returns the message."""

    class run:  # noqa: N801 - mirrors the attribute of a Ray actor handle
        remote = staticmethod(lambda message: message)


def test_only_unseen_tokens_travel_and_the_actor_rebuilds_each_context():
    model = SimulatedModel(16, seed=3, latency=LatencyProfile.uniform(0.0))
    local, host = model.server("local"), ServerHost(model.server("target0").remote_spec())
    remote = RemoteServer("target0", Recorder(), group=None)
    out = list(range(1, 11))  # a generation's verified tokens (a list that only grows)
    calls = [Score(Context(out, 10, (3, 4)), 2, GREEDY)]
    out += [5, 6]
    calls += [Score(Context(out, 12, (7,)), 1, GREEDY), Score(Context(out, 11, ()), 0, GREEDY)]  # the last: queued
    calls += [Draft(Context(out, 12, (7, 8)), 3, GREEDY)]
    other = [9, 9, 9]  # a new generation
    calls += [Score(Context(other, 3, ()), 0, GREEDY)]
    sent = []
    for call in calls:
        if call.context.base is other:  # what pools pick replicas by: the prefix the actor holds, without asking it
            assert remote.cached_len(Context(out, 12, (7, 8, 1))) == 14
        _, message = remote.submit(call)
        sent.append(message[3])  # the tokens of the verified sequence it carries
        assert message[1].context is None  # the call itself travels without its context
        result = host.run(message)
        assert message[1].context == call.context  # rebuilt in the actor
        assert result == local.run(call, None)
    assert sent == [tuple(range(1, 11)), (5, 6), (), (), (9, 9, 9)]
    assert remote.cached_len(Context(out, 12, (7, 8, 1))) == 0  # it now holds the new generation
