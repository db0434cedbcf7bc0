#!/usr/bin/env python3
"""Per-kernel GPU times of one profiled step, from Nsight Compute's CSV
(`ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv`
over `gpu_bench --kernels ...`): the kernels in launch order with their durations, the total,
the ten longest, and the time by kind (products, rounding to 16 bits, im2col/col2im, pooling,
elementwise, reductions, the commit).

Usage: python3 bench/ncu_table.py FILE.csv [...]
"""
import csv
import re
import sys

# A kernel's kind, by the first pattern its name matches.
KINDS = [
    ("products (cuBLAS, cuDNN)", r"gemm|nvjet|splitK|convolve_common|xmma|cutlass"),
    ("rounding to 16 bits", r"round_kernel"),
    ("im2col/col2im", r"im2col|col2im"),
    ("pooling", r"pool"),
    ("elementwise (fused)", r"fused_elementwise"),
    ("reductions", r"reduce"),
    ("commit", r"commit_kernel"),
]


def kind(name):
    for k, pattern in KINDS:
        if re.search(pattern, name):
            return k
    return "other"


def main():
    for path in sys.argv[1:]:
        rows = []
        with open(path, newline="") as f:
            lines = [line for line in f if line.startswith('"')]
        for r in csv.DictReader(lines):
            if r.get("Metric Name") != "gpu__time_duration.sum":
                continue
            value = float(r["Metric Value"].replace(",", ""))
            unit = r.get("Metric Unit", "ns")
            scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3,
                     "msecond": 1e3}.get(unit, 1e-3)
            rows.append((int(r["ID"]), r["Kernel Name"], value * scale))
        rows.sort()
        total = sum(t for _, _, t in rows)
        print(f"== {path}: {len(rows)} kernels, {total:.1f} us of GPU time")
        for i, name, t in rows:
            print(f"  {i:4d} {t:8.1f} us  {name[:110]}")
        print("  longest:")
        for i, name, t in sorted(rows, key=lambda r: -r[2])[:10]:
            print(f"  {i:4d} {t:8.1f} us  {name[:110]}")
        by_kind = {}
        for _, name, t in rows:
            by_kind[kind(name)] = by_kind.get(kind(name), 0.0) + t
        print("  by kind:")
        for k, t in sorted(by_kind.items(), key=lambda kv: -kv[1]):
            print(f"  {t:8.1f} us  {k}")


if __name__ == "__main__":
    main()
