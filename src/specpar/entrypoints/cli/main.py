"""The ``specpar`` command line: one module per subcommand, each with ``register(subparsers)`` (heavy imports stay
inside the command functions, so that ``specpar --help`` starts fast). :func:`main` is the one place where a user's
mistake becomes one line on stderr and exit status 2, and Ctrl-C "interrupted" and 130."""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import logging
import os
import signal
import sys

from specpar.core.errors import SpecparError
from specpar.entrypoints.cli import arguments

COMMANDS = ("simulate", "plan", "hsd_plan", "heatmap", "reproduce", "table", "generate", "bench", "profile", "predict",
            "serve")  # fmt: skip

USAGE_ERROR = 2
INTERRUPTED = 130  # 128 + SIGINT, as shells report a process stopped by Ctrl-C


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line (the usage is a ``--help`` away), exit status 2."""

    def error(self, message: str):
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


class CommandLine(ArgumentParser):
    """The top parser: arguments no subcommand knows are refused by that subcommand's parser, so the line names
    ``specpar <command>`` and its ``--help`` (argparse itself leaves them to the top parser, which names neither)."""

    def parse_known_args(self, args=None, namespace=None):
        args, extra = super().parse_known_args(args, namespace)
        command = command_parser_of(self, args)
        if extra and command is not self:
            command.error(f"unrecognized arguments: {' '.join(extra)}")
        return args, extra


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser's subcommands by name (``{}`` for one without)."""
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices) if actions else {}


def all_commands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every command's parser by its name, modes too: ``{"simulate": ..., "simulate load": ..., ...}``."""
    out = {}
    for name, sub in subcommands(parser).items():
        out[prefix + name] = sub
        out.update(all_commands(sub, prefix + name + " "))
    return out


def command_parser_of(parser: argparse.ArgumentParser, args) -> argparse.ArgumentParser:
    """The parser of the command (and mode) ``args`` ran: the one whose ``--help`` a mistake points to."""
    for dest in ("command", "mode"):
        sub = subcommands(parser).get(getattr(args, dest, None))
        if sub is None:
            break
        parser = sub
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = CommandLine(
        prog="specpar",
        description="Lossless speculative inference: non-SI, SI and DSI, on a virtual clock, threads or real models.",
        epilog="`specpar COMMAND --help` for a command's flags (--help=all: its finer controls too).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=ArgumentParser)
    for name in COMMANDS:
        importlib.import_module(f"specpar.entrypoints.cli.{name}").register(sub)
    for command in all_commands(parser).values():  # the one global flag, also taken after the command
        command.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        command.epilog = f"-v, --verbose (any command, before or after its name): {VERBOSE}."
    return parser


VERBOSE = "log to stderr: loading, server placement, lookahead choice, each request's metrics"


@contextlib.contextmanager
def _verbose_log(verbose: bool):
    """While a command runs with -v: specpar's INFO records to the stderr of that moment, one line each."""
    if not verbose:
        yield
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
    logger = logging.getLogger("specpar")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def main(argv: list[str] | None = None, *, exit_on_interrupt: bool = False) -> int:
    """Run one command; returns its exit status (0, 1 for a FAIL of `reproduce`, 2 for a mistake, 130 for Ctrl-C).
    exit_on_interrupt: after Ctrl-C and its line, end the process at once (the executable: :func:`entry`)."""
    prog = "specpar"
    try:
        from specpar.entrypoints.cli.simulate import legacy_modes

        argv, legacy = legacy_modes(list(sys.argv[1:] if argv is None else argv))
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help, or a bad flag (the parser has printed its one line)
            return exc.code
        prog = command_parser_of(parser, args).prog
        arguments.build_all(args)  # the config objects the flags describe: a bad value stops here, in one line
        for line in ([legacy] if legacy else []) + arguments.warnings_of(args):
            _say(f"{prog}: warning: {line}")
        with _verbose_log(args.verbose):  # removed when the command ends: main() may run again in one process
            check_servers(args)
            if getattr(args, "runtime", None) == "ray":
                from specpar.runtimes.ray_cluster import ray_session

                with ray_session(args.ray_address, ray_cpus(args)):  # a local Ray it starts is stopped, Ctrl-C too
                    return args.func(args) or 0
            return args.func(args) or 0
    except KeyboardInterrupt:
        _say(f"{prog}: interrupted")
        if exit_on_interrupt:  # here, while the traceback still holds the run: leaving this block would free it
            os._exit(INTERRUPTED)
        return INTERRUPTED
    except SpecparError as exc:
        _say(f"{prog}: error: {one_line(str(exc))}")
        return USAGE_ERROR
    except BrokenPipeError:  # the reader of our output went away (`specpar ... | head`): nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that the flush at exit does not fail
        return 1
    except MemoryError as exc:  # a request too large for this machine (a 10^5-cell heatmap): say so, not where
        detail = f" ({one_line(str(exc))})" if str(exc) else ""
        _say(f"{prog}: error: not enough memory for this request{detail}: ask for less")
        return USAGE_ERROR
    except OSError as exc:  # the system refused a file or a device: say which, in one line
        where = f" {str(exc.filename)!r}:" if exc.filename else ""
        _say(f"{prog}: error:{where} {exc.strerror or exc}")
        return USAGE_ERROR


def _sp_degree(args) -> int:
    """The command's --sp-degree (1 for a command without one)."""
    sp = getattr(args, "sp_degree", None)
    return sp if isinstance(sp, int) and not isinstance(sp, bool) else 1


def check_servers(args) -> None:
    """Refuse, before anything starts, a run whose servers (sp_degree targets and a drafter: a thread or a process
    each) the runtime cannot run on this machine (:mod:`specpar.runtimes.capacity`)."""
    runtime = getattr(args, "runtime_config", None)
    if runtime is not None and runtime.name in ("threads", "ray"):
        from specpar.runtimes.capacity import check_servers as check

        check(runtime, _sp_degree(args), 1)


def ray_cpus(args) -> float:
    """The logical CPUs a command's largest Ray run needs: its sp_degree target servers and a drafter level or two,
    at --cpus-per-server each."""
    return (_sp_degree(args) + 2) * float(getattr(args, "cpus_per_server", 1.0) or 1.0)


def entry() -> None:
    """The ``specpar`` executable: :func:`main`, then exit with its status. Ctrl-C ends the process at once, without
    freeing what the run built (10^7 virtual-clock tokens: a GB of small objects, seconds to collect and free)."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupt)
    sys.exit(main(exit_on_interrupt=True))


def _interrupt(signum, frame):
    gc.freeze()  # every object alive now is left out of collections until the exit
    raise KeyboardInterrupt


def one_line(message: str) -> str:
    """A message on one line (what a library wrapped in a ConfigError may have written on several)."""
    return "; ".join(part.strip() for part in message.splitlines() if part.strip())


def _say(line: str) -> None:
    """One line on stderr, after what the output had written so far."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    print(line, file=sys.stderr, flush=True)


if __name__ == "__main__":  # pragma: no cover
    entry()
