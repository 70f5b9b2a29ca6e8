"""Every fenced command block of the README and docs/ marked runnable runs as written, on this (2-core) machine.

A block is marked by an HTML comment on the line before its fence (blank lines between allowed):

    <!-- runnable -->
    ```bash
    specpar simulate --runtime ray --sp-degree 4 -N 40 --repeats 1
    ```

bash blocks: each command (a line, with its continuation lines ending in a backslash; ``$`` prompts and comments
skipped) runs from the repository root, ``specpar`` (or ``.venv/bin/specpar``) as this interpreter's
``python -m specpar``; python blocks run whole. Each must exit 0. Runnable blocks use simulated models only (no
model download, no real-model command), so that the suite runs them anywhere.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest

from processes import run

pytestmark = pytest.mark.slow  # (pytest -m 'not slow' leaves it out: the fast inner loop)

ROOT = Path(__file__).resolve().parent.parent
MARK = "<!-- runnable -->"
REAL_MODEL_COMMANDS = ("generate", "bench", "profile")  # these load transformers models
TIMEOUT_S = 300  # a Ray example starts its own local Ray (20 s or more on a loaded machine)


def marked_blocks(path: Path, root: Path = ROOT) -> list[tuple[str, int, str, str]]:
    """(file relative to ``root``, line of the fence, language, body) of each block in ``path`` whose fence follows
    the mark."""
    lines = path.read_text().splitlines()
    blocks, i, marked = [], 0, False
    while i < len(lines):
        line = lines[i].strip()
        if line == MARK:
            marked = True
        elif line.startswith("```") and marked:
            lang, start, body = line[3:].strip(), i + 1, []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                body.append(lines[i])
                i += 1
            blocks.append((str(path.relative_to(root)), start, lang, "\n".join(body)))
            marked = False
        elif line:
            marked = False
        i += 1
    return blocks


def commands(body: str) -> list[list[str]]:
    """The commands of a bash block, as argv lists with ``specpar`` as ``python -m specpar``."""
    out = []
    for line in body.replace("\\\n", " ").splitlines():
        line = line.strip().removeprefix("$ ")
        if not line or line.startswith("#"):
            continue
        argv = shlex.split(line, comments=True)
        if argv and os.path.basename(argv[0]) == "specpar":
            argv = [sys.executable, "-m", "specpar", *argv[1:]]
        out.append(argv)
    return out


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


BLOCKS = [b for path in documents() for b in marked_blocks(path)]


def test_the_docs_mark_runnable_blocks():
    """The mark is in use (a rename of the mark, or of the files, would otherwise leave nothing tested)."""
    assert BLOCKS, f"no block marked {MARK!r} in README.md or docs/*.md"


def test_a_marked_block_is_found_and_split_into_commands(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text(f"text\n{MARK}\n\n```bash\n$ specpar simulate \\\n  -N 5  # short\n# a comment\necho hi\n```\n"
                   "```bash\nspecpar never-run\n```\n")  # fmt: skip
    blocks = marked_blocks(doc, tmp_path)
    assert [(b[0], b[1], b[2]) for b in blocks] == [("x.md", 4, "bash")]  # the second block is not marked
    assert commands(blocks[0][3]) == [[sys.executable, "-m", "specpar", "simulate", "-N", "5"], ["echo", "hi"]]


@pytest.mark.timeout(TIMEOUT_S * 2)
@pytest.mark.parametrize("where, line, lang, body", BLOCKS, ids=[f"{b[0]}:{b[1]}" for b in BLOCKS])
def test_a_runnable_block_runs_as_written(where, line, lang, body):
    if lang in ("bash", "sh", "console", "shell"):
        argvs = commands(body)
        assert argvs, f"{where}:{line}: an empty block"
        for argv in argvs:
            is_specpar = argv[:3] == [sys.executable, "-m", "specpar"]
            assert not (is_specpar and len(argv) > 3 and argv[3] in REAL_MODEL_COMMANDS), (
                f"{where}:{line}: runnable blocks use simulated models only: {' '.join(argv[3:])}"
            )
            done = run(argv, TIMEOUT_S, cwd=ROOT)
            assert done.returncode == 0, (
                f"{where}:{line}: {' '.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}"
            )
    elif lang == "python":
        done = run([sys.executable, "-c", body], TIMEOUT_S, cwd=ROOT)
        assert done.returncode == 0, f"{where}:{line}: exited {done.returncode}:\n{done.stderr[-3000:]}"
    else:
        pytest.fail(f"{where}:{line}: a runnable block must be bash or python, not {lang!r}")
