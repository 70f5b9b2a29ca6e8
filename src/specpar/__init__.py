"""specpar: lossless speculative inference (non-SI, SI, DSI), one algorithm, many clocks."""

from specpar.backends import LatencyProfile, SimulatedDrafter, SimulatedModel
from specpar.core.decoding import Decoding
from specpar.core.errors import ConfigError, SamplingDefaultWarning, ServerError, SpecparError, SpecparWarning
from specpar.core.params import SamplingParams
from specpar.core.results import GenerationResult
from specpar.entrypoints.api import generate
from specpar.entrypoints.engine import Engine
from specpar.planning import min_lookahead, sp_degree_needed

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
    "SamplingDefaultWarning",
]
