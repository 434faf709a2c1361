#!/usr/bin/env python3
"""Draws the PNG of `quantserve bench matrix` from its JSON (and from nothing else): one row
of panels per metric (output token throughput, mean TPOT, mean TTFT), one column per
concurrency; in each panel the KV-cache budgets along x and one bar per scheme. A cell that
did not run is marked "error" where its bar would be.

`quantserve bench matrix` runs this itself when its --python imports matplotlib; by hand:
  python3 -m venv .venv-plot
  .venv-plot/bin/pip install -r scripts/requirements-plot.txt
  .venv-plot/bin/python scripts/plot_bench_matrix.py RESULT_DIR/matrix.json -o matrix.png
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")  # files only: no display is needed or wanted
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

METRICS = [
    ("output_throughput", "output tok/s (higher is better)"),
    ("mean_tpot_ms", "mean TPOT ms (lower is better)"),
    ("mean_ttft_ms", "mean TTFT ms (lower is better)"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", help="the JSON bench matrix wrote (RESULT_DIR/LABEL.json)")
    ap.add_argument("-o", "--out", required=True, help="PNG to write")
    args = ap.parse_args()
    with open(args.json) as f:
        m = json.load(f)

    schemes = [s["name"] for s in m["schemes"]]
    budgets = [b["text"] for b in m["kv_cache_memory"]]
    concurrencies = m["max_concurrency"]
    cells = {(c["scheme"], c["kv_cache_memory"], c["max_concurrency"]): c for c in m["cells"]}

    fig, axes = plt.subplots(len(METRICS), len(concurrencies), squeeze=False,
                             figsize=(4.2 * len(concurrencies) + 1.5, 3.0 * len(METRICS)))
    width = 0.8 / max(len(schemes), 1)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for row, (key, ylabel) in enumerate(METRICS):
        for col, conc in enumerate(concurrencies):
            ax = axes[row][col]
            for i, scheme in enumerate(schemes):
                for j, budget in enumerate(budgets):
                    x = j - 0.4 + width * (i + 0.5)
                    cell = cells.get((scheme, budget, conc))
                    value = cell.get(key) if cell and cell["status"] == "ok" else None
                    if value is None:
                        ax.text(x, 0, "error", rotation=90, ha="center", va="bottom",
                                fontsize=7, color="red")
                        continue
                    ax.bar(x, value, width, color=colors[i % len(colors)])
            ax.set_xticks(range(len(budgets)))
            ax.set_xticklabels([f"KV {b}" for b in budgets])
            ax.set_ylabel(ylabel, fontsize=8)
            if row == 0:
                ax.set_title(f"concurrency {conc}", fontsize=10)
            ax.grid(axis="y", alpha=0.3)
    handles = [Patch(color=colors[i % len(colors)], label=s) for i, s in enumerate(schemes)]
    fig.legend(handles=handles, loc="center right", title="scheme", fontsize=8)
    cpu = m.get("cpu", {})
    ds = m.get("dataset", {})
    fig.suptitle(
        f"bench matrix ({m.get('label', '')}): {m.get('model', '')}, {ds.get('num_prompts')} "
        f"prompts {ds.get('random_input_len')} in / {ds.get('random_output_len')} out\n"
        f"{cpu.get('model_name', '?')}, {cpu.get('n_cpus', '?')} CPUs, serve threads "
        f"{m.get('threads') or 'default'}, {m.get('date', '')}",
        fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.85, 0.95))
    fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
