"""Running code in a subprocess where some packages cannot be imported (as if not installed), to show a path never
imports them: ``python -c`` of :func:`blocking` + the code."""

from __future__ import annotations

HEAVY = ("torch", "transformers", "accelerate", "gguf", "datasets")  # what '.[models]' no longer installs


def blocking(packages=HEAVY) -> str:
    """Python source that makes importing any of ``packages`` (or their submodules) an ImportError naming it."""
    return f"""
import sys
class _Blocked:
    names = {tuple(packages)!r}
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ImportError(f"blocked import of {{name}}: this path must not import it")
        return None
sys.meta_path.insert(0, _Blocked())
"""
