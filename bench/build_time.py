#!/usr/bin/env python3
"""The test build's time, two revisions on one machine (issue 43's "the whole test build at least
2x faster than before the change, measured the same way on the same machine").

Each revision is exported with `git archive` into a scratch folder, configured the way
scripts/test.sh configures CI (Release, -Werror, tests and benchmarks, the benchmarks at -O1;
an older tree ignores the options it does not know) and built from scratch with
`cmake --build -jJOBS`, one revision after the other. Every compiler process (g++ and nvcc) runs
under this script as CMake's compiler launcher, which logs its wall seconds. The table gives each
build's wall time, its compiler seconds, and the compiler seconds of the units both revisions
build, so that a suite that grew is still compared unit for unit.

Usage: python3 bench/build_time.py [--jobs N] [--target T] [BEFORE [AFTER]]
  BEFORE defaults to ef62125 (the last commit before issue 43), AFTER to HEAD. --target builds
  one target instead of everything (to try the script quickly).
"""
import argparse
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def launch(log: str, cmd: list) -> int:
    """The compiler launcher: runs cmd and appends "seconds output-file" to log."""
    start = time.monotonic()
    rc = subprocess.call(cmd)
    out = next((cmd[i + 1] for i in range(len(cmd) - 1) if cmd[i] == "-o"), "?")
    with open(log, "a") as f:
        f.write(f"{time.monotonic() - start:.3f} {out}\n")
    return rc


def unit_name(out: str) -> str:
    """A unit's object path from its target's folder on, the same in both trees."""
    return re.sub(r"^.*CMakeFiles/", "", out)


def build(rev: str, scratch: pathlib.Path, jobs: int, target: str) -> tuple[float, dict]:
    src = scratch / rev
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    log = scratch / f"{rev}.log"
    launcher = f"{sys.executable};{pathlib.Path(__file__).resolve()};--launch;{log}"
    subprocess.run(["cmake", "-S", str(src), "-B", str(src / "build"), "-DCMAKE_BUILD_TYPE=Release",
                    "-DTYPEFLOW_WERROR=ON", "-DTYPEFLOW_BUILD_BENCH=ON", "-DTYPEFLOW_BUILD_TESTS=ON",
                    "-DTYPEFLOW_BENCH_OPT=-O1", f"-DCMAKE_CXX_COMPILER_LAUNCHER={launcher}",
                    f"-DCMAKE_CUDA_COMPILER_LAUNCHER={launcher}"],
                   check=True, stdout=subprocess.DEVNULL)
    cmd = ["cmake", "--build", str(src / "build"), f"-j{jobs}"]
    if target:
        cmd += ["--target", target]
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"the build of {rev} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    units: dict = {}
    for line in log.read_text().splitlines():
        secs, out = line.split(maxsplit=1)
        units[unit_name(out)] = units.get(unit_name(out), 0.0) + float(secs)
    return wall, units


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--launch":
        sys.exit(launch(sys.argv[2], sys.argv[3:]))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("revs", nargs="*", default=[])
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--target", default="")
    a = p.parse_args()
    before = a.revs[0] if a.revs else "ef62125"
    after = a.revs[1] if len(a.revs) > 1 else "HEAD"
    revs = [subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", r], check=True,
                           capture_output=True, text=True).stdout.strip() for r in (before, after)]
    with tempfile.TemporaryDirectory() as tmp:
        (w0, u0), (w1, u1) = (build(r, pathlib.Path(tmp), a.jobs, a.target) for r in revs)
    common = sorted(set(u0) & set(u1), key=lambda k: -u0[k])
    nvcc = [k for k in common if k.endswith(".cu.o")]
    rows = [
        ("the build, wall", w0, "", w1, ""),
        ("compiler seconds, every unit", sum(u0.values()), f" in {len(u0)} units",
         sum(u1.values()), f" in {len(u1)} units"),
        (f"the {len(common)} units both build", sum(u0[k] for k in common), "",
         sum(u1[k] for k in common), ""),
        ("... of them nvcc units", sum(u0[k] for k in nvcc), f" in {len(nvcc)}",
         sum(u1[k] for k in nvcc), ""),
    ]
    print(f"| | {revs[0]} (before) | {revs[1]} (after) | before / after |")
    print("|---|---:|---:|---:|")
    for name, x, xs, y, ys in rows:
        ratio = f"{x / y:.2f}x" if y > 0 else "-"
        print(f"| {name} | {x:.0f} s{xs} | {y:.0f} s{ys} | {ratio} |")
    print()
    print("| unit | before | after | before / after |")
    print("|---|---:|---:|---:|")
    for k in common:
        print(f"| {k} | {u0[k]:.1f} s | {u1[k]:.1f} s | {u0[k] / u1[k]:.2f}x |")
    for name, u, other in (("before", u0, u1), ("after", u1, u0)):
        only = sorted(set(u) - set(other), key=lambda k: -u[k])
        if only:
            print(f"\nonly {name} ({sum(u[k] for k in only):.0f} s): " +
                  ", ".join(f"{k} {u[k]:.1f} s" for k in only))


if __name__ == "__main__":
    main()
