"""Algorithms (docs/design.md, layer 2): each a scheduler of tasks on servers, run unchanged on every runtime."""

from specpar.spec.dsi import dsi
from specpar.spec.hsd import hsd
from specpar.spec.hsd_sp import hsd_sp
from specpar.spec.nonsi import non_si
from specpar.spec.si import si

ALGORITHMS = ("nonsi", "si", "dsi", "hsd", "hsd-sp")

__all__ = ["non_si", "si", "dsi", "hsd", "hsd_sp", "ALGORITHMS"]
