"""llama.cpp's own command-line tools, built for the benchmarks from the llama.cpp source vendored in the
llama-cpp-python sdist (the version specpar pins). Never a dependency of specpar, and none of its code is in this
repository: the sdist is fetched with pip into the cache and built there once.

    .venv/bin/python -m benchmarks.llama_cpp_tools   # builds, then prints the tools' directory (a helper module)

``tools()`` returns the directory holding ``llama-speculative-simple`` (llama.cpp's draft-model speculative
decoding, the code path of llama-server's ``--model-draft``), ``llama-speculative`` (its older example with
drafted trees) and ``llama-completion`` (plain decoding); about 5 minutes of 2 cores the first time.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

VERSION = "0.3.36"
TARGETS = ("llama-speculative-simple", "llama-speculative", "llama-completion")


def cache() -> Path:
    from specpar.backends.weights import cache_dir

    return cache_dir() / f"llama.cpp-{VERSION}"


def source() -> Path:
    """The llama.cpp source tree of the llama-cpp-python sdist, fetched with pip and unpacked once."""
    root = cache()
    tree = root / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp"
    if (tree / "CMakeLists.txt").is_file():
        return tree
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", str(root),
         f"llama-cpp-python=={VERSION}"],
        check=True,
    )  # fmt: skip
    sdist = next(root.glob(f"llama_cpp_python-{VERSION}.tar.gz"))
    with tarfile.open(sdist) as tar:
        tar.extractall(root, filter="data")
    return tree


def tools() -> Path:
    """The directory of the built tools (built on first use)."""
    build = cache() / "build"
    bindir = build / "bin"
    if all((bindir / t).is_file() for t in TARGETS):
        return bindir
    src = source()
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(
        ["cmake", "-S", str(src), "-B", str(build), *generator, "-DCMAKE_BUILD_TYPE=Release",
         "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_APP=OFF",
         "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_EXAMPLES=ON", "-DLLAMA_OPENSSL=OFF"],
        check=True,
    )  # fmt: skip
    subprocess.run(["cmake", "--build", str(build), "--parallel", "--target", *TARGETS], check=True)
    return bindir


EVAL = re.compile(r"(prompt eval|eval) time =\s+([\d.]+) ms /\s+(\d+)")


def completion(bindir: Path, model, prompt: str, n: int, threads: int, cores: str, extra=()) -> dict:
    """One greedy run of ``llama-completion`` (llama.cpp's plain decoding) on ``threads`` threads pinned to ``cores``:
    {"text", "time_ms": its prompt eval + eval times as it reports them (model load excluded), "prompt_ms": its
    prompt eval time (the time to the first token), "process_s": the whole process}. ``extra``: more flags."""
    t = str(threads)
    cmd = ["taskset", "-c", cores, str(bindir / "llama-completion"), "-m", str(model), "-no-cnv", "--no-display-prompt",
           "-p", prompt, "-n", str(n), "--temp", "0", "--top-k", "1", "-t", t, "-tb", t, "-c", "2048", "--seed", "0",
           *extra]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL)
    if proc.returncode:
        raise RuntimeError(f"llama-completion failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    times = {kind: float(ms) for kind, ms, _ in EVAL.findall(proc.stderr)}
    return {
        "text": proc.stdout,
        "time_ms": sum(times.values()),
        "prompt_ms": times.get("prompt eval"),
        "process_s": time.perf_counter() - t0,
    }


def same_text(a: str, b: str) -> bool:
    """The same text up to the shorter one's end (llama.cpp's speculative run may go a few tokens past -n; its
    tools end their output with newlines of their own)."""
    a, b = a.rstrip("\n"), b.rstrip("\n")
    n = min(len(a), len(b))
    return n > 0 and a[:n] == b[:n]


def cpu_range(part: str) -> range:
    """The CPUs of one part of a taskset list ("3" or "0-3")."""
    lo, _, hi = part.partition("-")
    return range(int(lo), int(hi or lo) + 1)


if __name__ == "__main__":
    print(tools())
