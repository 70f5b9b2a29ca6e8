"""What a GGUF file says about itself, read from its header without loading it, and a clear refusal otherwise.

GGUF (llama.cpp's format, version 2 or 3): the magic ``GGUF``, a version, the tensor and key counts, the key-value
metadata, one record per tensor (name, dimensions, type, offset), then the tensor data from the next multiple of
``general.alignment`` (32 by default). :func:`read_header` reads the metadata keys (strings and numbers; arrays,
such as a tokenizer's 150k tokens, are skipped over, but for the token types, and the tokens themselves when asked
for: :func:`read_header`'s ``tokens``) and every tensor record, and checks that the data
of every tensor lies inside the file, so that a truncated download is named as such before llama.cpp maps it.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specpar.core.errors import ConfigError

MAGIC = b"GGUF"
# GGML type id -> (name, elements per block, bytes per block); types not listed are left to llama.cpp to judge
TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
}  # fmt: skip
# GGUF value types: fixed sizes (struct codes), 8 = string, 9 = array
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9
KEPT_ARRAYS = ("tokenizer.ggml.token_type",)  # arrays read into the metadata (the others are skipped)
TOKENS = "tokenizer.ggml.tokens"  # the tokenizer's token texts by id: read only when asked for (150k strings)
_U64 = struct.Struct("<Q")


@dataclass
class GGUFHeader:
    """A GGUF file's header: its ``metadata`` strings and numbers, and per tensor its type name and shape."""

    path: Path
    version: int
    metadata: dict = field(default_factory=dict)
    tensors: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", "?"))

    def matrix_types(self) -> set[str]:
        """The type names of the 2-D weights (the matrices a forward pass multiplies by)."""
        return {kind for kind, shape in self.tensors.values() if sum(d > 1 for d in shape) >= 2}


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def skip(self, n: int) -> int:
        """Move the cursor ``n`` bytes on; returns where it was (EOFError past the end)."""
        if self.at + n > len(self.data):
            raise EOFError
        self.at += n
        return self.at - n

    def take(self, fmt: str):
        return struct.unpack_from("<" + fmt, self.data, self.skip(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        start = self.skip(self.take("Q"))
        return self.data[start : self.at].decode("utf-8", "replace")

    def value(self, kind: int, keep: bool = False):
        """The value of type ``kind`` at the cursor; arrays are skipped (None), or with ``keep`` an array of numbers
        is returned as a NumPy array and an array of strings as a list."""
        if kind in SCALARS:
            return self.take(SCALARS[kind])
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            item, n = self.take("I"), self.take("Q")
            if item in SCALARS and keep:
                at = self.skip(n * struct.calcsize(SCALARS[item]))
                return np.frombuffer(self.data, dtype="<" + SCALARS[item], count=n, offset=at).copy()
            if item in SCALARS:  # skipped at once
                self.at += n * struct.calcsize(SCALARS[item])
            elif item == STRING and keep:
                return [self.string() for _ in range(n)]
            elif item == STRING:  # a tokenizer's tokens and merges: 150k strings, skipped by their lengths
                data, at, length = self.data, self.at, _U64.unpack_from
                for _ in range(n):
                    at += 8 + length(data, at)[0]
                self.at = at
            else:
                for _ in range(n):
                    self.value(item)
            if self.at > len(self.data):
                raise EOFError
            return None
        raise ValueError(f"unknown metadata value type {kind}")


def read_header(path, tokens: bool = False) -> GGUFHeader:
    """The header of the GGUF file at ``path``; a ConfigError naming the problem when it is missing, not a file,
    not GGUF, or cut short (its header, or the data of a tensor, runs past the end of the file). tokens: also keep
    the tokenizer's token texts (``metadata[TOKENS]``, a list by id), to compare two files' tokenizers."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"no GGUF file at {str(path)!r}: give the path of a .gguf model file")
    if not path.is_file():
        raise ConfigError(f"{str(path)!r} is not a file: give the path of a .gguf model file")
    with open(path, "rb") as f:
        if f.read(4) != MAGIC:
            raise ConfigError(
                f"{str(path)!r} is not a GGUF file (it does not start with 'GGUF'): the llama.cpp backend loads "
                "GGUF models; for a transformers directory use --backend transformers"
            )
        try:  # the header is read from a mapping of the file: only the pages it spans are read
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _parse_bytes(path, data, KEPT_ARRAYS + ((TOKENS,) if tokens else ()))
        except ConfigError:
            raise
        except (EOFError, ValueError, struct.error) as exc:
            why = "it ends inside its header" if isinstance(exc, EOFError) else f"its header is damaged ({exc})"
            raise ConfigError(f"{str(path)!r} is not a readable GGUF file: {why} (a truncated download?)") from exc


def _parse_bytes(path: Path, data: bytes, kept: tuple[str, ...]) -> GGUFHeader:
    size = len(data)
    r = _Reader(data)
    r.at = 4
    version = r.take("I")
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version}, where llama.cpp reads 2 and 3")
    n_tensors, n_kv = r.take("Q"), r.take("Q")
    header = GGUFHeader(path, version)
    for _ in range(n_kv):
        key, kind = r.string(), r.take("I")
        value = r.value(kind, keep=key in kept)
        if value is not None:
            header.metadata[key] = value
    ends = []
    for _ in range(n_tensors):
        name, n_dims = r.string(), r.take("I")
        shape = tuple(r.take("Q") for _ in range(n_dims))
        kind, offset = r.take("I"), r.take("Q")
        name_size = TYPES.get(kind)
        header.tensors[name] = (name_size[0] if name_size else f"type{kind}", shape)
        if name_size:
            ends.append((offset + math.prod(shape) // name_size[1] * name_size[2], name))
    alignment = int(header.metadata.get("general.alignment", 32))
    start = (r.at + alignment - 1) // alignment * alignment
    if ends:
        end, name = max(ends)
        if start + end > size:
            raise ConfigError(
                f"{str(path)!r} is cut short: it has {size:,} bytes but its tensor {name!r} ends at byte "
                f"{start + end:,} (a truncated download? fetch or join the file again)"
            )
    return header
