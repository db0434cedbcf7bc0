#!/usr/bin/env python3
"""The GPU table of bench/README.md from one run's gpu_bench.json (bench/gpu.cu) and
gpu_baselines.json (bench/gpu_baselines.py), both written by scripts/gpu_session.sh into $OUT.

Usage: python3 bench/gpu_table.py DIR   (DIR holds the two JSON files)
"""
import json
import os
import sys


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "."
    with open(os.path.join(d, "gpu_bench.json")) as f:
        ours = json.load(f)
    with open(os.path.join(d, "gpu_baselines.json")) as f:
        base = json.load(f)
    rows = {r["name"]: r for r in ours}
    print("| benchmark | ms | rate | against |")
    print("|---|---|---|---|")
    baseline_of = {
        "fused": "copy (device to device, 64M floats)",
        "sum": "copy (device to device, 64M floats)",
        "typeflow matmul 4096^3 FP32 (session)": "cublasSgemm direct 4096^3 FP32",
        "typeflow matmul 4096^3 TF32 (session)": "cublasSgemm direct 4096^3 TF32",
    }
    for r in ours:
        against = ""
        for key, b in baseline_of.items():
            if r["name"].startswith(key) and b in rows:
                ratio = r["rate"] / rows[b]["rate"]
                against = f"{ratio:.3f} x {'copy' if 'copy' in b else 'direct cuBLAS'}"
        rate = f"{r['rate']:,.1f} {r['unit']}"
        print(f"| {r['name']} | {r['ms']:.4f} | {rate} | {against} |")
    step = [r for r in ours if r["name"].startswith("seed model train step")]
    graphs = [r for r in step if "graph" in r["name"]]
    graph = min(graphs, key=lambda r: r["ms"]) if graphs else None  # the fastest captured step
    for r in base["results"]:
        ms = r["seconds"] * 1e3
        against = ""
        if graph:
            against = (f"typeflow's graph step {ms / graph['ms']:.2f} x faster" if ms > graph["ms"]
                       else f"typeflow's graph step {graph['ms'] / ms:.2f} x slower")
        print(f"| {r['name']}, batch {base['batch']} | {ms:.4f} | "
              f"{r['images_per_second']:,.0f} images/s | {against} |")


if __name__ == "__main__":
    main()
