"""Servers (docs/design.md, layer 5): things that return next-token distributions for a token sequence."""

from specpar.backends.simulated import Regimes, SimulatedDrafter, SimulatedModel, SimulatedServer
from specpar.backends.simulated_pair import SimulatedPair
from specpar.backends.stack import SimulatedStack
from specpar.core.latency import LatencyProfile

__all__ = [
    "LatencyProfile",
    "Regimes",
    "SimulatedModel",
    "SimulatedDrafter",
    "SimulatedServer",
    "SimulatedPair",
    "SimulatedStack",
]
