"""Servers (docs/design.md, layer 5): things that return next-token distributions for a token sequence."""

from specpar.models.latency import LatencyProfile
from specpar.models.simulated import SimulatedDrafter, SimulatedModel, SimulatedServer
from specpar.models.stack import SimulatedStack

__all__ = ["LatencyProfile", "SimulatedModel", "SimulatedDrafter", "SimulatedServer", "SimulatedStack"]
