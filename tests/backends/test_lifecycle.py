"""Lifecycle: a server is never reset, reused or torn down while a cancelled call still runs on it, and the process
never exits with a thread inside a forward pass.

The design (specpar.backends.transformers_server, specpar.runtimes.threads): a call holds its server while it runs
and ``reset()`` waits for it; a later runtime on a server waits for the earlier run's thread; at the interpreter's
exit the calls left running are waited for. Each test below failed before that design: the next arm of a
comparison reset a server under a cancelled tree pass, which then wrote onto the wiped cache (AttributeError
'NoneType' object has no attribute 'layers', or a cache that claims tokens it does not hold); and a worker thread
still in a forward pass at exit aborted the process (exit status 134).
"""

from __future__ import annotations

import json
import os
import time

import pytest

from processes import run_python
from specpar.backends.transformers_model import TransformersModel
from specpar.core.calls import Score, ScoreTree
from specpar.core.decoding import GREEDY
from specpar.core.trees import TokenTree, merge
from specpar.entrypoints import cli
from specpar.runtimes import Pool, ThreadRuntime
from tiny_transformers import reference_greedy, slow_down, slowed, tiny_pair

pytestmark = pytest.mark.slow  # (pytest -m 'not slow' leaves it out: the fast inner loop)

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the helpers (tiny_transformers) sit in tests/
PROMPT = (3, 5, 7, 9, 11)


def test_a_reset_waits_for_the_cancelled_call_still_running_on_the_server(monkeypatch):
    """The class: a tree pass cancelled mid-way and left running by close(); reset() while it runs; the next call
    on the server gives the rows of a fresh server."""
    target, _ = tiny_pair(vocab=64, seed=3)
    slow_down(target.module_on("cpu"), 0.5, 0.0)
    server = target.server("target0")
    tree = merge([TokenTree.chain(c) for c in ([10, 12, 15], [10, 13])])
    rt = ThreadRuntime([Pool([server], "target")])
    task = rt.submit(rt.pools[0], ScoreTree(PROMPT, tree, GREEDY))
    time.sleep(0.1)  # the pass is under way
    rt.cancel(task)
    rt.close()
    assert rt.left_running == ["specpar-target0"], "the pass should still be running: the test is not testing"
    server.reset()  # the next arm of a comparison starts from a cold cache
    for thread in rt._threads:  # this runtime's own worker, by handle (not any thread of that name)
        thread.join(5)  # the cancelled pass has ended (it wrote whatever it writes)
    after = server.run(Score(PROMPT + (10, 12), 2, GREEDY)).rows
    assert after == target.server().run(Score(PROMPT + (10, 12), 2, GREEDY)).rows
    assert server.tokens == PROMPT + (10, 12) and server._cache.layers[0].keys.shape[-2] == len(PROMPT) + 2


def test_tree_compare_on_a_pair_with_a_slow_forward_returns_the_targets_tokens_in_every_arm(
    pair_dirs, monkeypatch, capsys
):
    """`generate --tree 2,2,1 --compare` (the audit's crash, 2 of 2 on the default pair), with tree passes slow
    enough that a cancelled one is often still running when a DSI arm ends (6 times in 10), and repeats so that
    other arms follow DSI's."""
    monkeypatch.setattr(TransformersModel, "module_on", slowed(TransformersModel.module_on, 0.15, 0.03))
    argv = ["generate", "w1 w7 w3 w9 w2", "-N", "12", "--tree", "2,2,1", "--compare", "--repeats", "3", "--json"]
    models = ["--target", pair_dirs[0], "--drafter", pair_dirs[1], "--dtype", "float64", "--devices", "cpu"]
    assert cli.main(argv + models) == 0
    out = json.loads(capsys.readouterr().out)
    monkeypatch.undo()
    target = TransformersModel(pair_dirs[0], dtype="float64")
    expected = reference_greedy(target, target.encode("w1 w7 w3 w9 w2"), 12)
    assert {a: r["tokens"] for a, r in out["results"].items()} == dict.fromkeys(("dsi", "nonsi", "si"), expected)


RUNS = """
import gc, json, os, sys
sys.path.insert(0, {tests!r})
from specpar.backends.transformers_model import TransformersModel
from specpar.entrypoints.cli import entry
from tiny_transformers import slowed

TransformersModel({target!r})  # every import done once here; each run below is a fork that exits as `specpar` does

TransformersModel.module_on = slowed(TransformersModel.module_on, 0.4, 0.02)
sys.argv = ["specpar", *{argv!r}]
gc.freeze()  # the forks' exits leave the imported modules' objects alone (0.7 s a run instead of 3 s)
codes = []
for _ in range({runs}):
    pid = os.fork()
    if pid == 0:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        entry()  # sys.exit: the interpreter's own exit, atexit and C++ destructors included
    codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
print(json.dumps(codes))
"""


def test_eight_dsi_runs_in_processes_all_exit_0_after_their_result(pair_dirs):
    """A worker thread left in a forward pass (the target's slow tree passes) when the process exits aborted it with
    status 134 ("terminate called without an active exception") after a correct result: each of 8 runs of
    `generate --json` (forks of one process that imported torch, so that the 8 cost one start-up) must exit 0.
    3 tokens: a short run ends while its cancelled tree pass still runs. With the exit's wait for the calls left
    running removed (atexit.unregister(threads.finish_left_calls) in the forks, the control), 20 of 20 runs of 3
    tokens aborted, against 8 of 20 runs of 6 tokens (load 9-12): 8 short runs catch it more surely than 20 long."""
    argv = ["generate", "w1 w7 w3 w9 w2", "-N", "3", "--sp-degree", "2", "--tree", "2,2,1", "--json"]
    argv += ["--target", pair_dirs[0], "--drafter", pair_dirs[1], "--dtype", "float64", "--devices", "cpu"]
    done = run_python(RUNS.format(tests=TESTS, argv=argv, runs=8, target=pair_dirs[0]), timeout=110)
    assert done.returncode == 0, done.stderr[-3000:]
    codes = json.loads(done.stdout.splitlines()[-1])
    assert codes == [0] * 8, f"exit statuses {codes}: {done.stderr[-2000:]}"
