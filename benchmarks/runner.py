"""The one benchmark runner and its results format.

A benchmark is a module of this package with a module-level ``BENCHMARK = Benchmark(...)``: what it compares (its
arms), what it reports for each (its figures, with units), how one arm is measured, and optionally what it
concludes over the arms (ratios, goals). The runner parses the benchmark's options, runs every arm once per round,
the arms interleaved and their order rotated from round to round (so that a slow drift of a shared machine falls
on every arm alike), prints a table, and writes one JSON file:

    {"benchmark": NAME, "description": ..., "command": "python -m benchmarks NAME ...",
     "commit": SHA (+ "-dirty"), "started": ISO time (UTC), "seconds": wall time of the whole run,
     "machine": {"platform", "python", "cpus", "cpus_usable", "memory_gb", "processor"},
     "load_average": {"before": [1, 5, 15 min], "after": [...]},
     "options": {option: value}, "reports": {figure: what it is, with its unit},
     "arms": [{"name", "settings": {...}, "runs": [{figure: value} per round], "figures": {figure: median}}],
     "summary": {...} (the benchmark's conclusions: ratios, goals)}

under ``benchmarks/results/NAME.json`` unless ``-o FILE`` names another (``-o -``: none written).

    python -m benchmarks                      # the benchmarks and what each measures
    python -m benchmarks thread_overhead --rounds 9
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import json
import os
import pkgutil
import platform
import shlex
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


@dataclass(frozen=True)
class Arm:
    """One thing a benchmark measures: its name (a table row) and the settings that make it differ from the other
    arms (shown in the results, e.g. {"runtime": "threads"})."""

    name: str
    settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Benchmark:
    """What a benchmark module declares.

    description: one line (the listing) and, after a blank line, how to read the figures.
    reports: {figure: what it is, with its unit}; the table's columns, in this order.
    arms(args) -> the arms to run for the parsed options.
    measure(arm, args, round) -> {figure: value} for one run of one arm (round: 0, 1, ..., for seeds).
    options(parser): the benchmark's own options (the runner's are -o/--output and --rounds).
    summarize(arms, args) -> {conclusion: value} over the measured arms (a list of :class:`ArmResult`).
    rounds: how many times each arm runs by default (--rounds overrides), or a function of the options (one round
        per prompt).
    session(args) -> a context manager entered around every run (a Ray cluster started, models loaded once); what it
        yields is ``args.session`` while the arms run.
    passed(summary) -> False when the run shows a failure (two checkouts that differ): the exit status is then 1.
    """

    description: str
    reports: Mapping[str, str]
    arms: Callable[[argparse.Namespace], Sequence[Arm]]
    measure: Callable[[Arm, argparse.Namespace, int], Mapping[str, Any]]
    options: Callable[[argparse.ArgumentParser], None] | None = None
    summarize: Callable[[list[ArmResult], argparse.Namespace], Mapping[str, Any]] | None = None
    rounds: int | Callable[[argparse.Namespace], int] = 1
    session: Callable[[argparse.Namespace], contextlib.AbstractContextManager] | None = None
    passed: Callable[[Mapping[str, Any]], bool] | None = None


@dataclass
class ArmResult:
    """An arm and its runs: runs[r] is round r's figures; figures: the median over the rounds of each number."""

    arm: Arm
    runs: list[dict[str, Any]]

    @property
    def figures(self) -> dict[str, Any]:
        return {
            key: _median([run.get(key) for run in self.runs]) for key in dict.fromkeys(k for r in self.runs for k in r)
        }

    def values(self, key: str) -> list[Any]:
        """The figure ``key`` of every round."""
        return [run[key] for run in self.runs]

    def to_dict(self) -> dict:
        return {"name": self.arm.name, "settings": dict(self.arm.settings), "runs": self.runs, "figures": self.figures}


def _median(values: list[Any]) -> Any:
    """The median of numbers (the value itself for one round); the first value of anything else."""
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(numbers) == len(values) and numbers:
        return numbers[0] if len(numbers) == 1 else statistics.median(numbers)
    return values[0] if values else None


def benchmarks() -> dict[str, Benchmark]:
    """Every benchmark module of the package, by name."""
    found = {}
    for info in pkgutil.iter_modules([str(HERE)]):
        if info.name in ("runner", "__main__"):
            continue
        try:
            module = importlib.import_module(f"{__package__}.{info.name}")
        except ImportError:  # a benchmark whose optional dependencies (torch, ray) are not installed
            continue
        if isinstance(getattr(module, "BENCHMARK", None), Benchmark):
            found[info.name] = module.BENCHMARK
    return found


def load(name: str) -> Benchmark:
    try:
        module = importlib.import_module(f"{__package__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__package__}.{name}":
            raise
        raise SystemExit(f"benchmarks: no benchmark {name!r}; `python -m benchmarks` lists them") from None
    bench = getattr(module, "BENCHMARK", None)
    if not isinstance(bench, Benchmark):
        raise SystemExit(f"benchmarks: {name} declares no BENCHMARK (a helper module, or a script not ported yet)")
    return bench


def parser(name: str, bench: Benchmark) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m benchmarks {name}",
        description=bench.description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "-o",
        "--output",
        default=str(RESULTS / f"{name}.json"),
        metavar="FILE",
        help="where the results go (default benchmarks/results/NAME.json; '-': not written)",
    )
    default = "one per prompt" if callable(bench.rounds) else bench.rounds
    p.add_argument("--rounds", type=int, default=None, help=f"runs of each arm (default {default})")
    if bench.options is not None:
        bench.options(p)
    return p


def run(name: str, argv: Sequence[str], out=None) -> dict:
    """Run the benchmark ``name`` with the command-line options ``argv``; print its table on ``out`` (stdout) and
    write its results (returned)."""
    out = out or sys.stdout
    bench = load(name)
    args = parser(name, bench).parse_args(list(argv))
    if args.rounds is None:
        args.rounds = bench.rounds(args) if callable(bench.rounds) else bench.rounds
    if args.rounds < 1:
        raise SystemExit(f"benchmarks {name}: --rounds must be >= 1, got {args.rounds}")
    arms = {arm.name: arm for arm in bench.arms(args)}
    started, load_before, t0 = _now(), os.getloadavg(), time.perf_counter()
    order = list(arms)

    runs: dict[str, list] = {a: [] for a in order}
    with bench.session(args) if bench.session is not None else contextlib.nullcontext() as args.session:
        for r in range(args.rounds):
            shift = r % len(order)  # round r starts at arm r mod n: no arm is always the first (cold) or the last
            for a in order[shift:] + order[:shift]:
                runs[a].append(dict(bench.measure(arms[a], args, r)))
        measured = [ArmResult(arms[a], runs[a]) for a in order]
        summary = dict(bench.summarize(measured, args)) if bench.summarize is not None else {}
    results = {
        "benchmark": name,
        "description": bench.description.strip().split("\n")[0],
        "command": shlex.join(["python", "-m", "benchmarks", name, *argv]),
        "commit": _commit(),
        "started": started,
        "seconds": round(time.perf_counter() - t0, 3),
        "machine": machine(),
        "load_average": {"before": _rounded(load_before), "after": _rounded(os.getloadavg())},
        "options": {k: v for k, v in vars(args).items() if k not in ("output", "session")},
        "reports": dict(bench.reports),
        "arms": [m.to_dict() for m in measured],
        "summary": summary,
    }
    print_table(results, out)
    if args.output != "-":
        path = Path(args.output)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=1, default=str) + "\n")
        print(f"results: {path}", file=out)
    return results


def print_table(results: Mapping, out) -> None:
    """The arms' median figures as a plain table, then the summary and the machine's load."""
    columns = ["arm", *results["reports"]]
    rows = [[arm["name"], *(_cell(arm["figures"].get(k)) for k in results["reports"])] for arm in results["arms"]]
    widths = [max(len(str(c)), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(columns, widths))), file=out)
    for row in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))), file=out)
    for key, value in results["summary"].items():
        print(f"{key}: {_cell(value)}", file=out)
    before, after = results["load_average"]["before"][0], results["load_average"]["after"][0]
    print(
        f"load average {before:.2f} -> {after:.2f} on {results['machine']['cpus_usable']} cores; "
        f"{results['seconds']:.1f} s",
        file=out,
    )


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return "-" if value is None else str(value)


def machine() -> dict:
    """What the figures were measured on."""
    memory = None
    try:
        with open("/proc/meminfo") as f:
            memory = round(int(f.readline().split()[1]) / 2**20, 1)  # MemTotal, kB -> GiB
    except (OSError, ValueError, IndexError):
        pass
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_gb": memory,
        "processor": _processor(),
    }


def _processor() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _commit() -> str | None:
    """The checkout's commit, "-dirty" when it has uncommitted changes (None outside git)."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=HERE, capture_output=True,
                               text=True)  # fmt: skip
    except OSError:
        return None
    if sha.returncode != 0:
        return None
    return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def _rounded(loads) -> list[float]:
    return [round(x, 2) for x in loads]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "--list"):
        print(__doc__.split("\n\n")[0].strip() + "\n\nbenchmarks (python -m benchmarks NAME --help for one):")
        for name, bench in sorted(benchmarks().items()):
            first = " ".join(bench.description.strip().split("\n\n")[0].split())
            print(textwrap.fill(first, 80, initial_indent=f"  {name:<22} ", subsequent_indent=" " * 25))
        return 0
    results = run(argv[0], argv[1:])
    bench = load(argv[0])
    return 0 if bench.passed is None or bench.passed(results["summary"]) else 1
