"""specpar's benchmarks: each module declares one benchmark (``BENCHMARK``) that :mod:`benchmarks.runner` runs.

python -m benchmarks                 # the list
python -m benchmarks NAME [--help]   # one benchmark; its results under benchmarks/results/NAME.json
"""
