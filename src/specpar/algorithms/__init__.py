"""Algorithms (docs/design.md, layer 2): each a scheduler of tasks on servers, run unchanged on every runtime."""

from specpar.algorithms.dsi import dsi
from specpar.algorithms.hsd import hsd
from specpar.algorithms.hsd_sp import hsd_sp
from specpar.algorithms.nonsi import non_si
from specpar.algorithms.si import si

ALGORITHMS = ("nonsi", "si", "dsi", "hsd", "hsd-sp")

__all__ = ["non_si", "si", "dsi", "hsd", "hsd_sp", "ALGORITHMS"]
