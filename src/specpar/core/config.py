"""The two configuration objects that travel from a CLI flag (or an API keyword, or a request) to the algorithm.

:class:`SpeculativeConfig`: how a generation speculates (``from_vllm`` reads vLLM's shape of it).
:class:`RuntimeConfig`: where its tasks run. Both are frozen and checked when made (one :class:`ConfigError` before
any work starts). Each field's metadata names its command-line flag, deprecated spellings and help: the CLI builds its
option groups from these fields, so a flag has one spelling everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

from specpar.core.errors import ConfigError
from specpar.core.numbers import is_int, is_number

ALGORITHMS = ("nonsi", "si", "dsi", "hsd", "hsd-sp")
AUTO = "auto"  # the fastest of the algorithms on this machine, by prediction (specpar.prediction.auto)
AUTO_CHOOSES = ("lookahead", "tree", "proposer", "buffers", "prefill_replicas", "dedicated_cursor")
LOOKAHEAD_MODES = ("auto", "adaptive")
RUNTIMES = ("virtual", "threads", "ray")
CANCEL_MODES = ("now", "end")
PLACEMENTS = ("PACK", "SPREAD")
DRAFTER_PLACEMENTS = ("driver", "actor")


SEED_HELP = "every random draw of the run comes from this seed (an integer >= 0)"
"""What ``--seed`` means in every command (a command's help adds how several runs use it, e.g. run r: seed + r)."""


def flag(
    name: str,
    help: str,
    *,
    default: str | None = None,
    short: str | None = None,
    aliases: Sequence[str] = (),
    metavar: str | None = None,
    choices: Mapping[str, str] | None = None,
    advanced: bool = False,
):
    """A field's command-line spelling: ``name`` (and ``short``), with ``aliases`` its deprecated spellings (they
    still work for one release, with a warning). help: what the field does; default: the rule its default follows,
    in words (else the help shows the default value); choices: the values a text field takes, each with what it
    means; advanced: a finer control, listed by ``--help=all`` rather than ``--help``."""
    return {
        "flag": name,
        "short": short,
        "aliases": tuple(aliases),
        "help": help,
        "default": default,
        "metavar": metavar,
        "choices": None if choices is None else dict(choices),
        "advanced": advanced,
    }


def _positive_int(name: str, value, lo: int = 1, hi: int | None = None) -> int:
    if not is_int(value, lo, hi):
        bound = f">= {lo}" if hi is None else f">= {lo} and <= {hi}"
        raise ConfigError(f"{name} must be {bound} (an integer), got {value!r}")
    return value


def _optional_bool(name: str, value) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise ConfigError(f"{name} must be True, False or None (the default rule), got {value!r}")
    return value


@dataclass(frozen=True, kw_only=True)
class SpeculativeConfig:
    """How one generation speculates. ``None`` fields take the rule each one's help text states.

    Only the fields the algorithm uses matter: ``sp_degree`` and the DSI modes for "dsi" and "hsd-sp",
    ``tree`` for "si" and "dsi", ``buffers`` for "hsd" and "hsd-sp".
    """

    algorithm: str = field(
        default="dsi",
        metadata=flag(
            "--algorithm",
            "the algorithm",
            aliases=("--algo",),
            choices={
                "nonsi": "the target alone",
                "si": "a drafter proposes k tokens, the target verifies them in one pass",
                "dsi": "SI whose verifications run on --sp-degree target servers while drafting goes on",
                "hsd": "a stack of drafters, each verifying the one below",
                "hsd-sp": "HSD with DSI's parallel verification at the top",
                "auto": "the fastest exact method and its settings on this machine, by a prediction from its "
                "measured profile (`specpar predict` shows it)",
            },
        ),
    )
    lookahead: int | str | None = field(
        default=None,
        metadata=flag(
            "--lookahead",
            "draft tokens per verification (k; vLLM's num_speculative_tokens), or 'auto': the fastest by a "
            "simulation of the models' latencies and acceptance rate, or 'adaptive': re-chosen at each window (an "
            "SI round, a DSI chunk) from the acceptance seen so far, DSI's among those valid for its servers",
            default="the smallest that satisfies Eq. 1 on --sp-degree target servers when both models' latencies "
            "are known, else 5; a token tree's depth",
            short="-k",
            metavar="K|auto|adaptive",
        ),
    )
    sp_degree: int | None = field(
        default=None,
        metadata=flag(
            "--sp-degree",
            "speculation parallelism: target servers DSI and HSD-SP verify on at once (SI, non-SI and HSD use one)",
            default="every target server of the engine",
            metavar="SP",
        ),
    )
    tree: tuple[int, ...] | str | None = field(
        default=None,
        metadata=flag(
            "--tree",
            "SI and DSI draft token trees, verified in one target pass: widths k1,...,km (SpecInfer's expansion, "
            "k_i candidates at depth i; the lookahead is then m) or best:B[:W] (B nodes grown best-first by the "
            "drafter's path probability, W per drafter pass)",
            metavar="K1,...,KM|best:B",
        ),
    )
    proposer: str | None = field(
        default=None,
        metadata=flag(
            "--proposer",
            "what drafts for SI and DSI: the drafter model (default); ngram[:MIN:MAX], prompt lookup: the drafts "
            "follow an earlier occurrence of the last MIN..MAX tokens (default 1..3) in the prompt and output, no "
            "model; ngram[:MIN:MAX]+drafter: prompt lookup, and the drafter model where nothing matches",
            metavar="ngram[:MIN:MAX][+drafter]",
        ),
    )
    buffers: tuple[int, ...] | None = field(
        default=None,
        metadata=flag(
            "--buffers",
            "HSD: T_0,...,T_{K-1}, draft tokens each level gathers before the level above verifies them",
            default="the lookahead at every level",
            metavar="T0,...",
        ),
    )
    prefill_replicas: bool | None = field(
        default=None,
        metadata=flag(
            "--prefill-replicas",
            "DSI: every target server prefills the prompt at the start, in parallel",
            default="when the target's TTFT exceeds its TPOT or is unknown",
            advanced=True,
        ),
    )
    dedicated_cursor: bool | None = field(
        default=None,
        metadata=flag(
            "--dedicated-cursor",
            "DSI: keep one target server for passes on the verified prefix",
            default="when verification costs grow with the drafts fed, a per-token cost, or are unknown",
            advanced=True,
        ),
    )

    def __post_init__(self):
        if self.algorithm not in ALGORITHMS and self.algorithm != AUTO:
            raise ConfigError(f"algorithm must be one of {', '.join(ALGORITHMS)} or {AUTO}, got {self.algorithm!r}")
        k = self.lookahead
        if k is not None and k not in LOOKAHEAD_MODES and not is_int(k, 1):
            raise ConfigError(f"lookahead must be an integer >= 1, 'auto' or 'adaptive', got {k!r}")
        if self.sp_degree is not None:
            _positive_int("sp_degree", self.sp_degree, hi=1024)
        if self.buffers is not None:
            if isinstance(self.buffers, (str, bytes)) or not isinstance(self.buffers, Sequence) or not self.buffers:
                raise ConfigError(f"buffers must be a non-empty list of positive integers, got {self.buffers!r}")
            buffers = tuple(_positive_int(f"HSD's buffer size T_{i}", b) for i, b in enumerate(self.buffers))
            object.__setattr__(self, "buffers", buffers)
        if self.tree is not None:
            from specpar.core.trees import check_tree, parse_tree  # the tree's own rules (widths, best:B)

            tree = parse_tree(self.tree) if isinstance(self.tree, str) else check_tree(self.tree)
            object.__setattr__(self, "tree", tree)
            if self.algorithm not in ("si", "dsi"):
                raise ConfigError(f"token trees (tree=) work with algorithm 'si' or 'dsi', not {self.algorithm!r}")
        if self.lookahead == "adaptive" and (self.tree is not None or self.algorithm in ("hsd", "hsd-sp")):
            what = "token trees (their shape fixes the depth)" if self.tree is not None else repr(self.algorithm)
            raise ConfigError(f'lookahead="adaptive" is for SI and DSI over chains, not {what}')
        if self.proposer is not None:
            object.__setattr__(self, "proposer", str(parse_proposer(self.proposer)))
            if self.algorithm not in ("si", "dsi") and parse_proposer(self.proposer).ngram:
                raise ConfigError(f"the n-gram proposer drafts for algorithm 'si' or 'dsi', not {self.algorithm!r}")
        _optional_bool("prefill_replicas", self.prefill_replicas)
        _optional_bool("dedicated_cursor", self.dedicated_cursor)

    @property
    def speculates(self) -> bool:
        """Whether the algorithm drafts (everything but non-SI)."""
        return self.algorithm != "nonsi"

    @property
    def uses_drafter(self) -> bool:
        """Whether a drafter model drafts: every algorithm that speculates, unless the n-gram proposer drafts alone."""
        return self.speculates and (self.proposer is None or parse_proposer(self.proposer).uses_drafter)

    def replace(self, **changes) -> SpeculativeConfig:
        """A copy with ``changes`` (None values leave a field as it is), checked again."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None}) if changes else self

    def for_request(self, **changes) -> SpeculativeConfig:
        """A request's speculation over these defaults (an engine's or a server's): :meth:`replace`, except that a
        request switching to an algorithm that takes no token tree or n-gram proposer (non-SI, HSD) leaves the
        defaults' tree and n-gram proposer behind instead of being refused for them, and one switching to "auto"
        the defaults' settings it chooses itself (AUTO_CHOOSES); ones it names are checked."""
        kept = {k: v for k, v in changes.items() if v is not None}
        algorithm = kept.get("algorithm")
        if algorithm == AUTO:  # auto chooses the method's settings: the defaults' own are left behind
            return replace(self, **{**dict.fromkeys(AUTO_CHOOSES), **kept})
        if algorithm is not None and algorithm not in ("si", "dsi"):
            kept.setdefault("tree", None)
            if "proposer" not in kept and self.proposer is not None and parse_proposer(self.proposer).ngram:
                kept["proposer"] = None
        return replace(self, **kept) if kept else self

    @classmethod
    def from_vllm(cls, config: Mapping[str, Any]) -> SpeculativeConfig:
        """vLLM's ``speculative_config`` shape: ``method`` (an algorithm, or "ngram": the n-gram proposer, with
        ``prompt_lookup_min`` and ``prompt_lookup_max``), ``num_speculative_tokens`` (the lookahead) and this class's
        own field names; an unknown key is a ConfigError naming the known ones."""
        return cls(**_renamed(_ngram_method(config), VLLM_NAMES, cls))

    @classmethod
    def coerce(cls, value) -> SpeculativeConfig:
        """A SpeculativeConfig from itself, a vLLM-shaped mapping, a JSON object text, or None (the defaults)."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            value = _json_object(value, "speculative_config")
        if isinstance(value, Mapping):
            return cls.from_vllm(value)
        raise ConfigError(f"speculative_config must be a SpeculativeConfig or a mapping, got {type(value).__name__}")


# vLLM's names for SpeculativeConfig's fields
VLLM_NAMES = {"method": "algorithm", "num_speculative_tokens": "lookahead"}
LOOKUP_KEYS = ("prompt_lookup_min", "prompt_lookup_max")  # vLLM's n-gram sizes, with method "ngram"


def _ngram_method(config):
    """vLLM's ``method: "ngram"`` with its ``prompt_lookup_min``/``max`` as the n-gram proposer (the algorithm is then
    the config's ``algorithm``, or the default)."""
    if not isinstance(config, Mapping) or config.get("method") != "ngram":
        stray = [key for key in LOOKUP_KEYS if isinstance(config, Mapping) and key in config]
        if stray:
            raise ConfigError(f"{', '.join(stray)} go with method 'ngram' (vLLM's n-gram proposer)")
        return config
    out = {key: value for key, value in config.items() if key != "method" and key not in LOOKUP_KEYS}
    if "proposer" in out:
        raise ConfigError("method 'ngram' and proposer give the same setting twice")
    low, high = config.get("prompt_lookup_min"), config.get("prompt_lookup_max")
    low = low if low is not None else min(NGRAM_SIZES[0], high) if high is not None else NGRAM_SIZES[0]
    high = high if high is not None else max(NGRAM_SIZES[1], low)
    out["proposer"] = str(ProposerChoice(True, *check_ngram_sizes(low, high), False))
    return out


NGRAM_SIZES = (1, 3)  # the n-gram proposer's default prompt_lookup_min and prompt_lookup_max


def check_ngram_sizes(min_n, max_n) -> tuple[int, int]:
    """(min_n, max_n) if 1 <= min_n <= max_n are integers, else a ConfigError."""
    for name, n in (("prompt_lookup_min", min_n), ("prompt_lookup_max", max_n)):
        if not is_int(n, 1):
            raise ConfigError(f"{name} (the n of the n-grams matched) must be an integer >= 1, got {n!r}")
    if min_n > max_n:
        raise ConfigError(f"prompt_lookup_min ({min_n}) must be at most prompt_lookup_max ({max_n})")
    return min_n, max_n


@dataclass(frozen=True)
class ProposerChoice:
    """``SpeculativeConfig.proposer`` read: the n-gram proposer (``ngram``, with its sizes) or not, and whether the
    drafter model drafts (alone, or where the n-grams find nothing: ``fallback``)."""

    ngram: bool
    min_n: int = NGRAM_SIZES[0]
    max_n: int = NGRAM_SIZES[1]
    fallback: bool = False

    @property
    def uses_drafter(self) -> bool:
        return not self.ngram or self.fallback

    def __str__(self) -> str:
        if not self.ngram:
            return "drafter"
        return f"ngram:{self.min_n}:{self.max_n}" + ("+drafter" if self.fallback else "")


def parse_proposer(text) -> ProposerChoice:
    """ "drafter", "ngram", "ngram:MIN:MAX", each of the latter two with "+drafter" (a ConfigError otherwise)."""
    if not isinstance(text, str):
        raise ConfigError(f"proposer must be a string such as 'ngram:1:3', got {text!r}")
    spelled = text.replace(" ", "").lower()
    head, plus, tail = spelled.partition("+")
    parts = head.split(":")
    if head == "drafter" and not plus:
        return ProposerChoice(False)
    if parts[0] != "ngram" or len(parts) not in (1, 3) or (plus and tail != "drafter"):
        raise ConfigError(
            f"proposer must be 'drafter', 'ngram', 'ngram:MIN:MAX', or one of the last two with '+drafter', got {text!r}"
        )
    sizes = NGRAM_SIZES
    if len(parts) == 3:
        try:
            sizes = (int(parts[1]), int(parts[2]))
        except ValueError:
            raise ConfigError(f"the n-gram proposer's sizes are integers (ngram:MIN:MAX), got {text!r}") from None
    return ProposerChoice(True, *check_ngram_sizes(*sizes), bool(plus))


@dataclass(frozen=True, kw_only=True)
class RuntimeConfig:
    """Where a generation's tasks run. ``options`` passes any other keyword argument to the runtime's constructor
    (see :mod:`specpar.runtimes`: e.g. Ray's ``gpu_pools``), for what no field names."""

    name: str | None = field(
        default=None,
        metadata=flag(
            "--runtime",
            "where the servers run",
            default="virtual for simulated models, threads for real ones",
            choices={
                "virtual": "a discrete-event clock, exact and fast (offline)",
                "threads": "real wall time, one thread per server in this process",
                "ray": "real wall time, each server a Ray actor in its own process (pip install 'specpar[ray]')",
            },
        ),
    )
    cancel_frees: str | Mapping[str, str] = field(
        default="now",
        metadata=flag(
            "--cancel-frees",
            "virtual clock: when a cancelled task frees its server",
            choices={"now": "at once (preemptible servers)", "end": "at the end of its pass, as a forward pass does"},
            advanced=True,
        ),
    )
    link_ms: float | Mapping[str, float] = field(
        default=0.0,
        metadata=flag(
            "--link-ms",
            "one-way latency between the driver and the target servers, as on other nodes (the drafter stays "
            "beside the driver): the virtual clock adds 2 x MS to every target call, on Ray each target actor "
            "injects the delay",
            metavar="MS",
            advanced=True,
        ),
    )
    call_timeout_s: float | None = field(
        default=None,
        metadata=flag(
            "--call-timeout",
            "threads and Ray: seconds a call may run before its server counts as stalled",
            default="the runtime's",
            metavar="S",
            advanced=True,
        ),
    )
    address: str | None = field(
        default=None,
        metadata=flag(
            "--ray-address",
            "Ray: join a running cluster (`ray start --head` on one node, `ray start --address HOST:PORT` on the "
            "others)",
            default="a local Ray, loopback only, started for this run and stopped at its end",
            metavar="auto|HOST:PORT",
            advanced=True,
        ),
    )
    cpus_per_server: float = field(
        default=1.0,
        metadata=flag(
            "--cpus-per-server",
            "Ray: CPUs reserved for each server's actor, and its torch threads; target replicas also get one GPU "
            "each when the cluster has GPUs",
            metavar="CPUS",
            advanced=True,
        ),
    )
    placement: str = field(
        default="PACK",
        metadata=flag(
            "--placement",
            "Ray: placement group strategy for the servers",
            choices={"PACK": "on as few nodes as fit", "SPREAD": "across nodes"},
            advanced=True,
        ),
    )
    drafter_placement: str = field(
        default="driver",
        metadata=flag(
            "--drafter-placement",
            "Ray: where the drafter runs",
            choices={
                "driver": "on a thread of this process, no round trip per draft call",
                "actor": "in its own actor, like the targets",
            },
            advanced=True,
        ),
    )
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.name is not None and self.name not in RUNTIMES:
            raise ConfigError(f"runtime must be one of {', '.join(RUNTIMES)}, got {self.name!r}")
        check_cancel_frees(self.cancel_frees)
        check_link_ms(self.link_ms)
        t = self.call_timeout_s
        if t is not None and not is_number(t, 0, math.inf, lo_open=True, hi_open=True):
            raise ConfigError(f"call_timeout_s must be a finite number of seconds > 0 (or None), got {t!r}")
        check_ray_resources(self.cpus_per_server, self.placement)
        if self.drafter_placement not in DRAFTER_PLACEMENTS:
            raise ConfigError(f"drafter_placement must be one of {DRAFTER_PLACEMENTS}, got {self.drafter_placement!r}")
        if not isinstance(self.options, Mapping):
            raise ConfigError(f"runtime options must be a mapping of keyword arguments, got {self.options!r}")
        if self.name is not None and self.name != "virtual" and _set(self, "cancel_frees"):
            raise ConfigError("cancel_frees is a setting of the virtual clock (runtime 'virtual')")
        if self.name == "threads" and _set(self, "link_ms"):
            raise ConfigError("link_ms is modelled on the virtual clock and injected on Ray, not on threads")

    def replace(self, **changes) -> RuntimeConfig:
        return replace(self, **changes) if changes else self

    @classmethod
    def coerce(cls, runtime=None, options: Mapping[str, Any] | None = None, **fields_) -> RuntimeConfig:
        """A RuntimeConfig from a name, a RuntimeConfig or None, with ``options``' keys that are field names set as
        fields (the rest stay runtime keyword arguments) and ``fields_`` (None values ignored)."""
        config = runtime if isinstance(runtime, cls) else None
        if config is None:
            if runtime is not None and not isinstance(runtime, str):
                raise ConfigError(f"runtime must be a name, a RuntimeConfig or None, got {type(runtime).__name__}")
            config = cls(name=runtime)
        changes = {k: v for k, v in fields_.items() if v is not None}
        if options:
            if not isinstance(options, Mapping):
                raise ConfigError(f"runtime_options must be a mapping, got {type(options).__name__}")
            names = {f.name for f in fields(cls)} - {"options", "name"}
            changes.update({k: v for k, v in options.items() if k in names})
            rest = {k: v for k, v in options.items() if k not in names}
            if rest:
                changes["options"] = {**config.options, **rest}
        return replace(config, **changes) if changes else config


def _per_pool(value) -> list:
    """The values of a setting given for every pool (one value) or per pool name (a mapping)."""
    return list(value.values()) if isinstance(value, Mapping) else [value]


def check_cancel_frees(value) -> None:
    """A ConfigError unless ``value`` is a cancel mode, or a mapping of pool names to cancel modes."""
    for mode in _per_pool(value):
        if mode not in CANCEL_MODES:
            raise ConfigError(f"cancel_frees must be one of {CANCEL_MODES} (or a mapping to them), got {mode!r}")


def check_link_ms(value) -> None:
    """A ConfigError unless ``value`` is a finite number of ms >= 0, or a mapping of pool names to them."""
    for ms in _per_pool(value):
        if not is_number(ms, 0, math.inf, hi_open=True):
            raise ConfigError(f"link_ms must be a finite number of ms >= 0, got {ms!r}")


def check_ray_resources(cpus_per_server, placement) -> None:
    """A ConfigError unless ``cpus_per_server`` is a finite number > 0 and ``placement`` one of PLACEMENTS."""
    if not is_number(cpus_per_server, 0, math.inf, lo_open=True, hi_open=True):
        raise ConfigError(f"cpus_per_server must be a finite number > 0, got {cpus_per_server!r}")
    if placement not in PLACEMENTS:
        raise ConfigError(f"placement must be one of {PLACEMENTS}, got {placement!r}")


def _set(config, name: str) -> bool:
    """Whether a field differs from its default."""
    f = next(f for f in fields(config) if f.name == name)
    default = f.default if f.default is not MISSING else f.default_factory()
    value = getattr(config, name)
    return value != default and not (isinstance(value, Mapping) and not any(value.values()))


def _renamed(config: Mapping[str, Any], names: Mapping[str, str], cls) -> dict:
    if not isinstance(config, Mapping):
        raise ConfigError(f"a {cls.__name__} must be a mapping, got {type(config).__name__}")
    known = {f.name for f in fields(cls)}
    out = {}
    for key, value in config.items():
        name = names.get(key, key)
        if name not in known:
            accepted = sorted(known | set(names))
            raise ConfigError(f"unknown {cls.__name__} key {key!r}: known ones are {', '.join(accepted)}")
        if name in out:
            raise ConfigError(f"{cls.__name__}: {key!r} and {name!r} give the same setting twice")
        out[name] = tuple(value) if isinstance(value, list) else value
    return out


def _json_object(text: str, what: str) -> dict:
    from specpar.core.json_output import parse

    value = parse(text, what)
    if not isinstance(value, dict):
        raise ConfigError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


SPECULATIVE_FIELDS = tuple(f.name for f in fields(SpeculativeConfig))
RUNTIME_FIELDS = tuple(f.name for f in fields(RuntimeConfig) if f.name not in ("name", "options"))


def split_options(options: Mapping[str, Any], *, sampling: Sequence[str] = ()) -> tuple[dict, dict, dict]:
    """Keyword options of an entry point (``Engine``, ``generate``) split by the object each one names: (the
    SpeculativeConfig fields, vLLM's names for them too (``method="auto"``, ``num_speculative_tokens=5``; method
    "ngram": the n-gram proposer), the RuntimeConfig fields, the names in ``sampling``); an unknown name is a
    ConfigError that lists the known ones."""
    spec, runtime, rest = {}, {}, {}
    for name, value in options.items():
        if name in VLLM_NAMES:
            name, value = ("proposer", "ngram") if name == "method" and value == "ngram" else (VLLM_NAMES[name], value)
            if name in options or name in spec:
                raise ConfigError(f"{name!r} is given twice (once by vLLM's name for it)")
            spec[name] = value
        elif name in SPECULATIVE_FIELDS:
            spec[name] = value
        elif name in RUNTIME_FIELDS:
            runtime[name] = value
        elif name in sampling:
            rest[name] = value
        else:
            known = ", ".join([*sampling, *SPECULATIVE_FIELDS, *RUNTIME_FIELDS])
            what = "sampling parameter or option" if sampling else "option"
            raise ConfigError(f"unknown {what} {name!r}: known ones are {known}")
    return spec, runtime, rest


def speculative_config(base, changes: Mapping[str, Any]) -> SpeculativeConfig:
    """``base`` (a SpeculativeConfig, a vLLM-shaped mapping or None) with ``changes`` (None values ignored)."""
    return SpeculativeConfig.coerce(base).replace(**changes)
