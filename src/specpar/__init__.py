"""specpar: lossless speculative inference (non-SI, SI, DSI), one algorithm, many clocks."""

from specpar.api import generate
from specpar.decoding import Decoding
from specpar.engine import Engine
from specpar.errors import ConfigError, ServerError, SpecparError, SpecparWarning
from specpar.models import LatencyProfile, SimulatedDrafter, SimulatedModel
from specpar.params import SamplingParams
from specpar.planning import min_lookahead, sp_degree_needed
from specpar.results import GenerationResult

__version__ = "0.1.0"

__all__ = [
    "generate",
    "Engine",
    "Decoding",
    "SamplingParams",
    "LatencyProfile",
    "SimulatedModel",
    "SimulatedDrafter",
    "GenerationResult",
    "min_lookahead",
    "sp_degree_needed",
    "ConfigError",
    "ServerError",
    "SpecparError",
    "SpecparWarning",
]
