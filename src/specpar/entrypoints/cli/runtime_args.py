"""The runtime options of the commands that run generations: RuntimeConfig's flags (--runtime, --link-ms, the Ray
flags, ...), built from its fields by :mod:`.config_args`; the object is ``args.runtime_config``."""

from __future__ import annotations

from specpar.core.config import RUNTIMES, RuntimeConfig
from specpar.entrypoints.cli.config_args import ConfigOptions

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
    options = ConfigOptions(
        RuntimeConfig,
        "runtime_config",
        fields=fields,
        defaults={"name": default},
        choices={"name": tuple(choices)},
        convert={"link_ms": target_link},
    )
    options.add_to(p, "runtime", [f for f in fields if f not in RAY_FIELDS])
    options.add_to(p, "Ray (with --runtime ray)", [f for f in fields if f in RAY_FIELDS])
    return options


def experiment_runtime(args) -> dict:
    """The experiments' runtime keywords (``runtime=``, ``runtime_options=``) for ``args.runtime_config``: its name,
    and its fields that differ from their defaults."""
    config: RuntimeConfig = args.runtime_config
    default = RuntimeConfig()
    options = {
        name: getattr(config, name) for name in ALL_FIELDS[1:] if getattr(config, name) != getattr(default, name)
    }
    return {"runtime": config.name, "runtime_options": options or None}
