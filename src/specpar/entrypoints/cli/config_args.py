"""Option groups built from the configuration dataclasses, and the objects built back from the parsed flags.

Every field of :class:`~specpar.core.config.SpeculativeConfig`, :class:`~specpar.core.config.RuntimeConfig` and
:class:`~specpar.backends.simulated_pair.SimulatedPair` that carries :func:`specpar.core.config.flag` metadata is
one option: its spelling, short flag, help, metavar and choices come from the metadata, its argparse type from the
field's annotation, and its deprecated spellings become hidden flags that still work and warn
(:mod:`specpar.entrypoints.cli.aliases`). So a flag is spelled one way in every command.

    SPEC = ConfigOptions(SpeculativeConfig, "spec", fields=("algorithm", "lookahead"), defaults={"lookahead": 5})
    SPEC.add_to(parser, "speculation")       # in the command's register()
    ...                                      # main() calls build_all(args) after parsing:
    args.spec                                # a SpeculativeConfig; args.lookahead its lookahead

A command picks the fields it needs, its own defaults (:class:`Default`) and, for a text field, fewer choices. A
flag left out takes the command's default, else the field's. :func:`build_all` makes each object once, so a bad
value is one ConfigError naming the flag (one line on stderr, exit status 2). The resolved value of each field is
written back to its flag's attribute (``args.sp_degree``), for the command's own printing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass
from typing import Any

from specpar.core.config import VLLM_NAMES, SpeculativeConfig
from specpar.core.errors import ConfigError
from specpar.entrypoints.cli import aliases
from specpar.entrypoints.cli.options import integer, integers, number, seed, server_count

# argparse types the annotation alone does not give: a bounded count, a seed
FIELD_TYPES: dict[str, Callable[[str], Any]] = {"sp_degree": server_count, "seed": seed}
CONFIGS = "_configs"  # the parser default that lists a command's ConfigOptions, in the order they were added


@dataclass(frozen=True)
class Default:
    """A command's own default for a field, and why (shown in the help: "default 7: an 8-GPU node")."""

    value: Any
    why: str | None = None


PAPER_SP_DEGREE = Default(7, "an 8-GPU node with the drafter on the eighth, as in the paper")


def int_or_text(text: str) -> int | str:
    """An integer, or the text itself (``-k auto``); the config object judges the value."""
    try:
        return integer(text)
    except argparse.ArgumentTypeError:
        return text


def argument_type(hint) -> Callable[[str], Any] | type[bool]:
    """The argparse type of a field annotated ``hint``: bool (a --flag/--no-flag pair), integer, number, a list of
    integers, int_or_text, or str (text the config object parses, such as a token tree)."""
    kinds = (
        typing.get_args(hint)
        if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
        else (hint,)
    )
    kinds = {k for k in kinds if k is not type(None) and typing.get_origin(k) not in (Mapping, dict)}
    kinds = {typing.get_origin(k) or k for k in kinds}
    if kinds == {bool}:
        return bool
    if kinds == {int, str}:
        return int_or_text
    if kinds == {int}:
        return integer
    if kinds == {float}:
        return number
    if kinds == {tuple}:
        return integers
    if str in kinds:
        return str
    raise TypeError(f"no command-line type for a field annotated {hint}")


def shown(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


class ConfigOptions:
    """One configuration dataclass's flags in one command.

    cls: the dataclass. dest: the attribute of the parsed arguments that receives the object. fields: the fields
    the command exposes (default: every field with a flag). defaults: the command's defaults ({field: value or
    Default}). choices: fewer choices for text fields. old_values: deprecated values ({field: {old: new}}) still
    taken, with a warning. convert: what the object receives for a flag's value ({field: function}). helps: where
    a command gives a field a meaning of its own, its help ({field: text}, "{help}" standing for the field's).
    speculative_config: also take ``--speculative-config JSON`` (vLLM's shape), whose fields win over the flags.
    optional: the object is made only when one of its flags is given (else ``args.<dest>`` is None), and then
    needs every field of ``required``; the words name it in that error ("a pair given by numbers").
    """

    def __init__(
        self,
        cls,
        dest: str,
        *,
        fields=None,
        defaults: Mapping[str, Any] | None = None,
        choices: Mapping[str, tuple] | None = None,
        old_values: Mapping[str, Mapping[str, str]] | None = None,
        convert: Mapping[str, Callable] | None = None,
        helps: Mapping[str, str] | None = None,
        speculative_config: bool = False,
        optional: str | None = None,
        required: tuple[str, ...] = (),
    ):
        self.cls, self.dest = cls, dest
        self.flagged = {f.name: f for f in dataclasses.fields(cls) if "flag" in f.metadata}
        self.fields = tuple(self.flagged) if fields is None else tuple(fields)
        unknown = [name for name in self.fields if name not in self.flagged]
        if unknown:
            raise ValueError(f"{cls.__name__} has no flag for {unknown}")
        self.defaults = dict(defaults or {})
        self.choices = dict(choices or {})
        self.old_values = {k: dict(v) for k, v in (old_values or {}).items()}
        self.convert = dict(convert or {})
        self.helps = dict(helps or {})
        self.optional, self.required = optional, tuple(required)
        self.speculative_config = speculative_config
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
    def add_to(self, parser, title: str | None = None, fields=None, description: str | None = None):
        """Add the flags of ``fields`` (default: all the command exposes) to ``parser``, in a group when ``title``
        is given; returns the group (or the parser)."""
        container = parser.add_argument_group(title, description) if title else parser
        for name in self.fields if fields is None else fields:
            self._add(container, name)
        if self.speculative_config and not any(a.dest == "speculative_config" for a in parser._actions):
            container.add_argument(
                "--speculative-config",
                metavar="JSON",
                default=None,
                help='the speculation in vLLM\'s shape, e.g. \'{"method": "dsi", "num_speculative_tokens": 5, '
                '"sp_degree": 4}\' (the fields above by their names); its fields win over the flags',
            )
        configs = parser.get_default(CONFIGS) or []
        if self not in configs:
            parser.set_defaults(**{CONFIGS: [*configs, self]})
        return container

    def _add(self, container, name: str) -> None:
        meta = self.flagged[name].metadata
        kind = FIELD_TYPES.get(name) or argument_type(self.hints[name])
        kw: dict[str, Any] = {"dest": self.arg_dest(name), "default": None, "help": self.help(name)}
        if kind is bool:
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw["type"] = kind
            kw["metavar"] = meta["metavar"]
            choices = self.choices.get(name, tuple(meta["choices"] or ()) or None)
            if choices is not None:
                old = tuple(self.old_values.get(name, ()))
                kw["choices"] = (*choices, *old)
                if old:  # the old values work but are not shown
                    kw["metavar"] = meta["metavar"] or "{" + ",".join(choices) + "}"
        action = container.add_argument(*[s for s in (meta["short"], meta["flag"]) if s], **kw)
        aliases.add_deprecated(container, action, *meta["aliases"])

    def help(self, name: str) -> str:
        """The field's help text and its default in this command."""
        f = self.flagged[name]
        meta = f.metadata
        if name in self.defaults:
            d = self.defaults[name]
            value, why = (d.value, d.why) if isinstance(d, Default) else (d, None)
            words = f"default: {why}" if value is None else f"default {shown(value)}" + (f": {why}" if why else "")
        elif meta["default"]:
            words = f"default: {meta['default']}"
        elif f.default is not MISSING and f.default is not None:
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
                d = self.defaults[name]
                value = d.value if isinstance(d, Default) else d
            if value is not None:
                values[name] = value
        if self.optional is not None:
            if not given:
                setattr(args, self.dest, None)
                return None
            if any(name not in given for name in self.required):
                flags = [self.spelling(name) for name in self.required]
                raise ConfigError(f"{self.optional} needs {', '.join(flags[:-1])} and {flags[-1]}")
        for name, table in self.old_values.items():
            if values.get(name) in table:
                old, old_flag = values[name], aliases.notes(args).get(self.arg_dest(name), (self.flag(name),))[0]
                values[name] = table[old]
                aliases.note(args, self.arg_dest(name), f"{old_flag} {old}", f"{self.flag(name)} {table[old]}")
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
        try:
            config = SpeculativeConfig.coerce(text)
        except ConfigError as exc:
            raise ConfigError(str(exc).replace("speculative_config", "--speculative-config", 1)) from None
        out = {}
        for key in json.loads(text):
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
    lines = getattr(args, WARNINGS, None)
    if lines is None:
        lines = []
        setattr(args, WARNINGS, lines)
    if line not in lines:
        lines.append(line)


def warnings_of(args) -> list[str]:
    """The lines to print when the command starts: each deprecated spelling used, then the other warnings."""
    return [aliases.warning(old, new) for old, new in aliases.notes(args).values()] + list(
        getattr(args, WARNINGS, None) or ()
    )
