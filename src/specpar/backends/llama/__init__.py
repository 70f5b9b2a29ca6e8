"""GGUF models on llama.cpp (the ``llama`` extra): the default pair's native backend on the CPU.

:class:`LlamaModel` loads a GGUF file once per process; its :class:`LlamaServer` s keep their own contexts and KV
caches, cut to the common prefix on each call, and score chains and token trees in single passes. In the exact
settings (:mod:`specpar.backends.llama.settings`) a server's rows are bitwise those of one-token decoding, so every
algorithm's greedy output is the target's own. Importing this package does not load llama.cpp.
"""

from specpar.backends.llama.library import available
from specpar.backends.llama.model import LlamaModel
from specpar.backends.llama.server import LlamaServer
from specpar.backends.llama.settings import LlamaSettings

__all__ = ["LlamaModel", "LlamaServer", "LlamaSettings", "available"]
