#!/usr/bin/env python3
"""Per-kernel GPU times of one profiled step, from Nsight Compute's CSV
(`ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv`
over `gpu_bench --kernels ...`): the kernels in launch order with their durations, the total,
and the ten longest.

Usage: python3 bench/ncu_table.py FILE.csv [...]
"""
import csv
import sys


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


if __name__ == "__main__":
    main()
