"""First token of the main job's prompt (HumanEval 0), non-SI, before (70f8010) and after (this tree), interleaved."""

import json
import os
import statistics
import subprocess

trees = {"before 70f8010": "/tmp/eq_base/src", "after": "/work/wt/final/src"}
got = {k: [] for k in trees}
for r in range(3):
    for name, src in trees.items():
        env = dict(os.environ, PYTHONPATH=src)
        out = subprocess.run(
            [
                "/work/main/.venv/bin/specpar",
                "generate",
                "--dataset",
                "humaneval",
                "0",
                "--algorithm",
                "nonsi",
                "-N",
                "8",
                "--json",
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        res = json.loads(out)["results"]["nonsi"]
        got[name].append(res["ttft_ms"])
        print(name, "round", r, "ttft_ms", round(res["ttft_ms"]), "load", os.getloadavg()[0], flush=True)
med = {k: statistics.median(v) for k, v in got.items()}
print(json.dumps({"ttft_ms": got, "median_ms": med, "speedup": med["before 70f8010"] / med["after"]}))
