#!/usr/bin/env python3
"""Checks that nvcc's two passes over a translation unit agree on its kernels.

nvcc compiles a .cu file twice: a device pass (cicc, __CUDA_ARCH__ defined) that instantiates
and compiles the kernels, and a host pass that compiles the launches. typeflow's headers name
plans differently in the two passes (graph/traverse.hpp's `opaque`), which is safe only while
no kernel's template arguments depend on that name. A kernel that only the host pass
instantiates still compiles and links (its launch passes a null kernel to cudaLaunchKernel)
and fails only at run time, which a machine without a GPU never sees. This script finds it in the object file instead:

- every kernel the host pass launches has a host wrapper function,
  `__wrapper__device_stub_<kernel>` (so does every kernel the device pass compiled: the
  "launched" count is of both);
- every kernel the device pass compiled has a launch stub, `__device_stub__<mangled>` (from the
  stub file that the device pass writes and the host compile includes).

It fails when a wrapper has no stub, or when it finds no kernels at all: the object's host side
was optimized (g++ inlines the wrappers away; compile it without -O), or nvcc names its stubs
differently now. Either way the check would be vacuous.

Usage: check_kernels.py [--nm NM] [--cxxfilt CXXFILT] OBJECT...
"""
import argparse
import re
import subprocess
import sys

WRAPPER = "__wrapper__device_stub_"
STUB = re.compile(r"^_ZL\d+__device_stub__(Z.*)$")


def strip_params(name: str) -> str:
    """`void ns::k<1>(int*)` -> `void ns::k<1>`: drops the last top-level parenthesized list."""
    if not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0:
            return name[:i]
    return name


def kernels(obj: str, nm: str, cxxfilt: str) -> tuple[set, set]:
    symbols = subprocess.run([nm, obj], capture_output=True, text=True, check=True).stdout
    # Functions defined here (text or weak symbols), not variables local to them.
    names = [f[-1] for f in map(str.split, symbols.splitlines()) if len(f) == 3 and f[1] in "tTwW"]
    wrappers = [n for n in names if WRAPPER in n]
    # A stub's name holds the kernel's mangled name (without its leading '_') and then the
    # stub's own parameters; demangling "_" + that yields the kernel with extra parameters,
    # which strip_params drops along with the kernel's own.
    stubs = ["_" + m.group(1) for m in map(STUB.match, names) if m]
    # --no-recurse-limit: GNU c++filt gives up on deeply nested names otherwise and returns them
    # mangled (a fused region of 20 members did), which would read as a missing kernel.
    demangled = subprocess.run([cxxfilt, "--no-recurse-limit"], input="\n".join(wrappers + stubs),
                               capture_output=True, text=True, check=True).stdout.splitlines()
    if failed := [d for d in demangled if d.startswith("_Z")]:
        raise SystemExit(f"{obj}: {cxxfilt} cannot demangle {len(failed)} name(s), e.g. "
                         f"{failed[0][:200]}")
    launched = {strip_params(d.replace(WRAPPER, "", 1)) for d in demangled[:len(wrappers)]}
    compiled = {strip_params(d) for d in demangled[len(wrappers):]}
    return launched, compiled


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nm", default="nm")
    parser.add_argument("--cxxfilt", default="c++filt")
    parser.add_argument("objects", nargs="+")
    args = parser.parse_args()
    failed = False
    # CTest passes a target's several objects as one argument, separated by semicolons.
    objects = [o for arg in args.objects for o in arg.split(";") if o]
    for obj in objects:
        launched, compiled = kernels(obj, args.nm, args.cxxfilt)
        if not launched or not compiled:
            print(f"{obj}: no kernels found ({len(launched)} launched, {len(compiled)} compiled): "
                  "its host side was optimized (compile it without -O), or nvcc's stub names "
                  "changed; the check cannot see the passes")
            failed = True
            continue
        missing = sorted(launched - compiled)
        for k in missing:
            print(f"{obj}: launched by the host pass but not compiled by the device pass: {k}")
        print(f"{obj}: {len(launched)} kernels launched, {len(compiled)} compiled, "
              f"{len(missing)} missing")
        failed = failed or bool(missing)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
