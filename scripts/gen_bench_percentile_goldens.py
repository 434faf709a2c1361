#!/usr/bin/env python3
"""Writes tests/unit/fixtures/bench/numpy_percentiles.json: for a few lists of latencies,
numpy's np.percentile (default method "linear"), np.mean, np.median and np.std, the
statistics vLLM's serving benchmark reports (vllm/benchmarks/serve.py calculate_metrics).
The lists are fixed here (no RNG) so the fixture only changes when numpy's answers do.

Usage:
  python3 -m venv .venv-goldens
  .venv-goldens/bin/pip install -r scripts/requirements-goldens-numpy.txt
  .venv-goldens/bin/python scripts/gen_bench_percentile_goldens.py
"""
import json
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "unit", "fixtures", "bench", "numpy_percentiles.json")

PERCENTILES = [0, 1, 10, 25, 50, 75, 90, 95, 99, 99.9, 100]

CASES = {
    "single": [0.125],
    "two": [0.5, 0.1],
    "unsorted_ttfts": [0.0532, 0.0511, 0.2, 0.0498, 0.0731, 0.0502, 0.0519],
    "ties": [1.0, 1.0, 2.0, 2.0, 2.0, 3.0],
    # 101 values: integer virtual indexes at every whole percentile.
    "ramp_101": [i * 0.001 for i in range(101)],
    "itls_irregular": [0.02 + 0.0001 * ((i * 37) % 23) + (0.5 if i % 17 == 0 else 0.0)
                       for i in range(64)],
}


def main():
    cases = []
    for name, values in CASES.items():
        arr = np.array(values, dtype=np.float64)
        cases.append({
            "name": name,
            "values": values,
            "mean": float(np.mean(arr)),
            "median": float(np.median(arr)),
            "std": float(np.std(arr)),
            "percentiles": [[p, float(np.percentile(arr, p))] for p in PERCENTILES],
        })
    with open(OUT, "w") as f:
        json.dump({"numpy": np.__version__, "cases": cases}, f, indent=1)
        f.write("\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
