#!/usr/bin/env python3
"""Compile-time benchmark: a chain of N ops (alternating matmul and elementwise ops, with a
variable per matmul) is generated, planned and run by a session; with --grad the chain's sum is
differentiated with respect to every variable and the loss and all gradients are fetched in one
run. Reports g++ wall seconds and peak compiler memory for each N.
With --shared the graph is N levels of `h = tanh(h * h + h)` instead: every level reuses the one
below twice, the sharing that gradient graphs are full of. With --residual it is issue 15's
residual MLP (`h = h + relu(dense<64>(h))` N times, gradient and float32 Adam; default N: 2 4 8 12
16 20); --repeat is the same model with the N blocks as one `ty::repeat<N, "block">` (default N: 2 50
1000). With --quickstart it times
examples/quickstart.cpp at -O0 and -O2 (the figure the README states), and with --mnist the main
job, examples/mnist/main.cpp (forward, gradients, optimizer, training loop and checkpoint code;
with TYPEFLOW_SEPARATE_COMPILATION, as its build compiles it), and its other translation units at
-O2: typeflow_src.cpp (typeflow's non-template code), data.cpp (IDX and TFRecord input) and
flags.cpp (CLI11).
With --nvcc (beside --shared, --grad, --residual, --repeat or the chain) the same program, its
session on the CPU, is a .cu file compiled by nvcc for sm_90 (NVCC, default
/usr/local/cuda/bin/nvcc), and the table gives the seconds of its device-side compiler (cicc,
from `nvcc --time`) beside the whole compile: cicc walks the template arguments of every class
it instantiates as a tree, which is where sharing costs.
With --transformer it is issue 43's series: N pre-norm transformer blocks written out (d = 128,
4 heads, T = 64, layer norm and attention composed from today's ops), gradient and float32 Adam
(default N: 1 2 4 8 16); --transformer-fused is the same model with issue 45's fused ops
(`ty::transformer_block`: layer_norm, one qkv layer, attention<causal>, a gelu MLP; default N:
1 2 4 8 12 16). Series tables end with each row's cost per layer added since the row
before. With --variables: N scalar variables, the sum of their squares minimised by Momentum (a
training op of 2N + 1 assignments; default N: 50 100 200 300). With --debug a series compiles
at -O0 -g, as a Debug build does, instead of -O2; with --syntax-only at -O2 -fsyntax-only: every
template instantiated, no code generated, so the peak is the front end's alone. With --deep it
times test/deep/transformer_model.cpp (CTest's build.deep_transformer: 12 fused blocks, 150
variables, Adam, header-only) with that test's flags (-O2 -Wall -Wextra -Wpedantic -Werror
-fopenmp) and the TYPEFLOW_HAS_* definitions of the dependencies found under /usr/include and
/usr/local/cuda, as CMake would give it; --rounds=R compiles it R times (so --mnist and
--quickstart too: every wall time, the fastest user time). With --rounds=R every size of a
series is compiled R times, the rounds in turn (each round's order the reverse of the one
before, so that a drift in the host's speed reaches every size alike), and the table gives each
size's fastest run (user CPU seconds of the compiler, the least disturbed by a noisy host),
every run's wall seconds, and the slopes between the fastest runs; it ends with issue 43's rule: the cost per layer of the last
interval over that of the first, in time and in memory (linear: at most 1.2).
Usage: python3 bench/compile_time.py [--grad | --shared | --residual | --repeat | --transformer |
                                      --transformer-fused | --variables | --quickstart | --mnist |
                                      --deep] [--nvcc | --debug | --syntax-only] [--rounds=R]
                                      [N ...]
(default N: 25 50 100 200).
"""
import csv
import os
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
# TYPEFLOW_INCLUDE: another checkout's include/ (to time an earlier version the same way).
INCLUDE = pathlib.Path(os.environ.get("TYPEFLOW_INCLUDE", ROOT / "include"))
ELEMENTWISE = ["ty::tanh({})", "{} + b", "ty::relu({})", "{} * ty::constant<0.5>", "ty::sigmoid({})"]


def shared_source(n: int) -> str:
    lines = [
        "#include <typeflow/typeflow.hpp>",
        "namespace ty = typeflow;",
        'constexpr auto h0 = ty::placeholder<"x", float, ty::shape<ty::dyn, 16>>;',
    ]
    lines += [f"constexpr auto h{i} = ty::tanh(h{i - 1} * h{i - 1} + h{i - 1});" for i in range(1, n + 1)]
    lines += [
        "int main() {",
        "  ty::session s;",
        "  ty::tensor<float> in({4, 16});",
        f"  auto [r] = s.run(ty::fetch(ty::sum(h{n})), ty::feed(h0, in));",
        "  return r.item() == r.item() ? 0 : 1;",
        "}",
    ]
    return "\n".join(lines) + "\n"


def source(n: int, grad: bool = False) -> str:
    lines = [
        "#include <typeflow/typeflow.hpp>",
        "namespace ty = typeflow;",
        'constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 16>>;',
        'constexpr auto b = ty::variable<"b", float, ty::shape<16>, ty::fill<0.1>>;',
        "constexpr auto h0 = x;",
    ]
    for i in range(1, n + 1):
        prev = f"h{i - 1}"
        if i % 2 == 1:
            lines.append(
                f'constexpr auto W{i} = ty::variable<"W{i}", float, ty::shape<16, 16>, '
                f"ty::uniform<-0.25, 0.25>>;"
            )
            lines.append(f"constexpr auto h{i} = ty::matmul({prev}, W{i});")
        else:
            op = ELEMENTWISE[(i // 2) % len(ELEMENTWISE)].format(prev)
            lines.append(f"constexpr auto h{i} = {op};")
    lines += [
        "int main() {",
        "  ty::session s;",
        "  ty::tensor<float> in({4, 16});",
    ]
    if grad:
        ws = ", ".join(f"W{i}" for i in range(1, n + 1, 2))
        lines += [
            f"  constexpr auto loss = ty::sum(h{n});",
            f"  constexpr auto grads = ty::grad(loss, b, {ws});",
            "  auto out = ty::apply([&](auto... g) { return s.run(ty::fetch(loss, g...), "
            "ty::feed(x, in)); }, grads);",
            "  return std::get<0>(out).item() == std::get<0>(out).item() ? 0 : 1;",
        ]
    else:
        lines += [
            f"  auto [r] = s.run(ty::fetch(ty::sum(h{n})), ty::feed(x, in));",
            "  return r.item() == r.item() ? 0 : 1;",
        ]
    lines += ["}"]
    return "\n".join(lines) + "\n"


def residual_source(n: int, repeat: bool = False) -> str:
    """Issue 15's model: a residual MLP, `h = h + relu(dense<64>(h))` written out n times (or as
    one ty::repeat of n layers), a one-unit head, the mean squared error, and a float32 Adam
    update run by a session."""
    lines = [
        "#include <typeflow/typeflow.hpp>",
        "namespace ty = typeflow;",
        'constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 64>>;',
        'constexpr auto y = ty::placeholder<"y", float, ty::shape<ty::dyn, 1>>;',
        "constexpr auto h0 = x;",
    ]
    if repeat:
        lines += [f'constexpr auto h{n} = ty::repeat<{n}, "block">(',
                  '    [](auto h) { return h + ty::relu(ty::dense<"dense", 64>(h)); }, x);']
    else:
        lines += [f'constexpr auto h{i} = h{i - 1} + ty::relu(ty::dense<"block{i}", 64>(h{i - 1}));'
                  for i in range(1, n + 1)]
    lines += [
        f'constexpr auto loss = ty::mean(ty::square(ty::dense<"head", 1>(h{n}) - y));',
        "constexpr auto train = ty::adam(ty::constant<0.001>).minimize(loss);",
        "int main() {",
        "  ty::session s;",
        "  s.initialize(train);",
        "  ty::tensor<float> in({4, 64}), out({4, 1});",
        "  auto [l] = s.run(ty::fetch(loss, train), ty::feed(x, in), ty::feed(y, out));",
        "  return l.item() == l.item() ? 0 : 1;",
        "}",
    ]
    return "\n".join(lines) + "\n"


def variables_source(n: int) -> str:
    """Issue 43's many-variables case: n scalar variables, the sum of their squares minimised by
    Momentum (one assignment per variable and per slot in one training op), fetched with the
    loss in a session."""
    lines = ["#include <iostream>", "#include <typeflow/typeflow.hpp>", "namespace ty = typeflow;"]
    lines += [f'constexpr auto v{i} = ty::variable<"v{i}", float, ty::shape<>, ty::fill<{i % 7 + 1}>>;'
              for i in range(n)]
    lines += [
        "constexpr auto loss = " + " + ".join(f"ty::square(v{i})" for i in range(n)) + ";",
        "constexpr auto train = ty::momentum(ty::constant<0.1>, ty::constant<0.9>).minimize(loss);",
        "int main() {",
        "  ty::session s;",
        "  s.initialize(train);",
        "  auto [l] = s.run(ty::fetch(loss, train));",
        "  std::cout << l.item() << \"\\n\";",
        "}",
    ]
    return "\n".join(lines) + "\n"


def transformer_source(n: int, d: int = 128, heads: int = 4, t: int = 64) -> str:
    """Issue 43's transformer series: n pre-norm blocks written out, d = 128, 4 heads, T = 64
    tokens, with today's ops (layer norm from mean and rsqrt with a gain and a bias, each head's
    attention a softmax over matmuls of slices, concatenated), an MLP of 4d with relu, a
    16-class head, the mean cross-entropy and a float32 Adam update run by a session."""
    dh = d // heads
    lines = [
        "#include <typeflow/typeflow.hpp>",
        "namespace ty = typeflow;",
        f'constexpr auto x = ty::placeholder<"x", float, ty::shape<{t}, {d}>>;',
        f'constexpr auto y = ty::placeholder<"y", std::int32_t, ty::shape<{t}>>;',
        "template <ty::fixed_string Name, class X>",
        "consteval auto layer_norm(X h) {",
        "  auto c = h - ty::mean<1>(h, ty::keepdims);",
        "  auto n = c * ty::rsqrt(ty::mean<1>(ty::square(c), ty::keepdims) + ty::constant<1e-5>);",
        f'  return n * ty::variable<Name + ty::fixed_string("/gamma"), float, ty::shape<{d}>, '
        "ty::fill<1.0>> +",
        f'         ty::variable<Name + ty::fixed_string("/beta"), float, ty::shape<{d}>>;',
        "}",
        "template <std::int64_t J, class Q, class K, class V>",
        "consteval auto head(Q q, K k, V v) {",
        f"  using B = ty::ints<0, J * {dh}>;",
        f"  using S = ty::ints<{t}, {dh}>;",
        "  auto s = ty::matmul(ty::slice<B, S>(q), ty::transpose<1, 0>(ty::slice<B, S>(k)));",
        f"  return ty::matmul(ty::softmax(s * ty::constant<{1 / dh ** 0.5}>), ty::slice<B, S>(v));",
        "}",
        "template <ty::fixed_string Name, class X>",
        "consteval auto block(X h) {",
        '  auto n = layer_norm<Name + ty::fixed_string("/ln1")>(h);',
        f'  auto q = ty::dense<Name + ty::fixed_string("/q"), {d}>(n);',
        f'  auto k = ty::dense<Name + ty::fixed_string("/k"), {d}>(n);',
        f'  auto v = ty::dense<Name + ty::fixed_string("/v"), {d}>(n);',
        "  auto a = ty::concat<1>(" + ", ".join(f"head<{j}>(q, k, v)" for j in range(heads)) + ");",
        f'  auto h1 = h + ty::dense<Name + ty::fixed_string("/o"), {d}>(a);',
        '  auto m = layer_norm<Name + ty::fixed_string("/ln2")>(h1);',
        f'  return h1 + ty::dense<Name + ty::fixed_string("/proj"), {d}>(',
        f'                  ty::relu(ty::dense<Name + ty::fixed_string("/fc"), {4 * d}>(m)));',
        "}",
        "constexpr auto h0 = x;",
    ]
    lines += [f'constexpr auto h{i} = block<"b{i}">(h{i - 1});' for i in range(1, n + 1)]
    lines += [
        f'constexpr auto logits = ty::dense<"head", 16>(layer_norm<"lnf">(h{n}));',
        "constexpr auto loss = ty::mean(ty::sparse_softmax_cross_entropy_with_logits(logits, y));",
        "constexpr auto train = ty::adam(ty::constant<0.001>).minimize(loss);",
        "int main() {",
        "  ty::session s;",
        "  s.initialize(train);",
        f"  ty::tensor<float> in({{{t}, {d}}});",
        f"  ty::tensor<std::int32_t> labels({{{t}}});",
        "  auto [l] = s.run(ty::fetch(loss, train), ty::feed(x, in), ty::feed(y, labels));",
        "  return l.item() == l.item() ? 0 : 1;",
        "}",
    ]
    return "\n".join(lines) + "\n"


def fused_transformer_source(n: int, d: int = 128, heads: int = 4, t: int = 64) -> str:
    """The same series with the fused ops of issue 45: n `ty::transformer_block`s (layer_norm,
    one qkv dense layer, split heads, attention<causal>, merge heads, a gelu MLP of 4d) on
    [1, T, d], a final layer norm, a 16-class head, the mean cross-entropy and float32 Adam."""
    lines = [
        "#include <typeflow/typeflow.hpp>",
        "namespace ty = typeflow;",
        f'constexpr auto x = ty::placeholder<"x", float, ty::shape<1, {t}, {d}>>;',
        f'constexpr auto y = ty::placeholder<"y", std::int32_t, ty::shape<{t}>>;',
        "constexpr auto h0 = x;",
    ]
    lines += [f'constexpr auto h{i} = ty::transformer_block<"b{i}", {heads}, {4 * d}>(h{i - 1});'
              for i in range(1, n + 1)]
    lines += [
        f'constexpr auto logits = ty::dense<"head", 16>(ty::layer_norm_layer<"lnf">(h{n}));',
        "constexpr auto loss = ty::mean(ty::sparse_softmax_cross_entropy_with_logits(",
        "    ty::reshape<-1, 16>(logits), y));",
        "constexpr auto train = ty::adam(ty::constant<0.001>).minimize(loss);",
        "int main() {",
        "  ty::session s;",
        "  s.initialize(train);",
        f"  ty::tensor<float> in({{1, {t}, {d}}});",
        f"  ty::tensor<std::int32_t> labels({{{t}}});",
        "  auto [l] = s.run(ty::fetch(loss, train), ty::feed(x, in), ty::feed(y, labels));",
        "  return l.item() == l.item() ? 0 : 1;",
        "}",
    ]
    return "\n".join(lines) + "\n"


def limit_flags(cxx: str) -> list:
    """The constant-evaluation budgets that the CMake target raises (CMakeLists.txt), so that a
    program compiled here is compiled as a user's would be."""
    if "clang" in pathlib.Path(cxx).name:
        return ["-fconstexpr-steps=1073741824"]
    return ["-fconstexpr-ops-limit=2147483647"]


def compile_file(src: pathlib.Path, cxx: str, opt: str, out: pathlib.Path,
                 defs: list = ()) -> tuple[float, float, float]:
    """Wall seconds, user CPU seconds and peak resident MiB of one compile."""
    cmd = ["/usr/bin/time", "-f", "%e %U %M", cxx, "-std=c++20", *opt.split(), *defs,
           *limit_flags(cxx), f"-I{INCLUDE}", "-c", str(src), "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"compile failed for {src.name}:\n{done.stderr[-4000:]}")
    secs, user, kb = done.stderr.strip().splitlines()[-1].split()
    return float(secs), float(user), int(kb) / 1024


def compile_cuda(src: pathlib.Path, nvcc: str, out: pathlib.Path) -> tuple[float, float, float]:
    """nvcc's whole compile (seconds, peak MiB of its largest process) and cicc's seconds."""
    times = out.with_suffix(".csv")
    cmd = ["/usr/bin/time", "-f", "%e %M", nvcc, "--time", str(times), "-std=c++20", "-O2",
           "-arch=sm_90", "--expt-relaxed-constexpr", "--diag-suppress=186",
           f"-I{ROOT / 'include'}", "-c", str(src), "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"compile failed for {src.name}:\n{done.stderr[-4000:]}")
    secs, kb = done.stderr.strip().splitlines()[-1].split()
    # nvcc --time: CSV rows (source, phase, phase inputs, phase output, arch, tool, metric,
    # unit), the metric in ms.
    cicc_ms = 0.0
    for row in csv.reader(times.read_text().splitlines()):
        if len(row) >= 8 and row[1].strip().startswith("cicc"):
            if row[-1].strip() != "ms":
                sys.exit(f"nvcc --time: unexpected unit {row[-1].strip()!r}")
            cicc_ms += float(row[-2])
    return float(secs), int(kb) / 1024, cicc_ms / 1000


def measure(n: int, cxx: str, mode: str, nvcc: str = "", opt: str = "-O2") -> tuple:
    with tempfile.TemporaryDirectory() as tmp:
        src = pathlib.Path(tmp) / f"graph_{n}.{'cu' if nvcc else 'cpp'}"
        src.write_text(shared_source(n) if mode == "shared" else
                       residual_source(n) if mode == "residual" else
                       residual_source(n, True) if mode == "repeat" else
                       transformer_source(n) if mode == "transformer" else
                       fused_transformer_source(n) if mode == "transformer-fused" else
                       variables_source(n) if mode == "variables" else
                       source(n, mode == "grad"))
        if nvcc:
            return compile_cuda(src, nvcc, pathlib.Path(tmp) / "graph.o")
        return compile_file(src, cxx, opt, pathlib.Path(tmp) / "graph.o")


def rounds_of(args: list) -> int:
    """R of --rounds=R (1 without it)."""
    return next((int(a.split("=", 1)[1]) for a in args if a.startswith("--rounds=")), 1)


def main() -> None:
    args = sys.argv[1:]
    rounds = rounds_of(args)
    cxx = os.environ.get("CXX", "g++")
    examples = {"--quickstart": "quickstart.cpp", "--mnist": "mnist/main.cpp"}
    for flag, path in examples.items():
        if flag in args:
            print(f"| examples/{path} | wall s ({cxx}), every run | user s, fastest | peak MiB |")
            print("|---|---:|---:|---:|")
            with tempfile.TemporaryDirectory() as tmp:
                # The main job's build compiles typeflow's non-template code once, in
                # typeflow_src.cpp (TYPEFLOW_SEPARATE_COMPILATION, as its CMake targets define).
                defs = ["-DTYPEFLOW_SEPARATE_COMPILATION"] if flag == "--mnist" else []
                for opt in ("-O0", "-O2"):
                    runs = [compile_file(ROOT / "examples" / path, cxx, opt,
                                         pathlib.Path(tmp) / "q.o", defs) for _ in range(rounds)]
                    walls = ", ".join(f"{r[0]:.1f}" for r in runs)
                    print(f"| {opt} | {walls} | {min(r[1] for r in runs):.1f} | "
                          f"{max(r[2] for r in runs):.0f} |", flush=True)
                if flag == "--mnist":
                    # The main job's other translation units, at -O2: typeflow's out-of-line
                    # code, the data input, and the flags with CLI11.
                    for other in ("typeflow_src.cpp", "data.cpp", "flags.cpp"):
                        secs, user, mib = compile_file(ROOT / "examples" / "mnist" / other, cxx,
                                                       "-O2", pathlib.Path(tmp) / "f.o", defs)
                        print(f"| {other} -O2 | {secs:.1f} | {user:.1f} | {mib:.0f} |",
                              flush=True)
            return
    if "--deep" in args:
        deep_transformer(cxx, rounds)
        return
    mode = ("grad" if "--grad" in args else "shared" if "--shared" in args else
            "residual" if "--residual" in args else "repeat" if "--repeat" in args else
            "transformer" if "--transformer" in args else
            "transformer-fused" if "--transformer-fused" in args else
            "variables" if "--variables" in args else "chain")
    sizes = [int(a) for a in args if not a.startswith("--")] or (
        [2, 4, 8, 12, 16, 20] if mode == "residual" else [2, 50, 1000] if mode == "repeat" else
        [1, 2, 4, 8, 16] if mode == "transformer" else
        [1, 2, 4, 8, 12, 16] if mode == "transformer-fused" else
        [50, 100, 200, 300] if mode == "variables" else
        [25, 50, 100, 200])
    what = {"grad": "N ops, forward + gradient", "shared": "N shared levels",
            "chain": "N ops", "residual": "residual MLP depth N, gradient + Adam",
            "repeat": "residual MLP, ty::repeat of depth N, gradient + Adam",
            "transformer": "pre-norm transformer, N blocks, gradient + Adam",
            "transformer-fused": "ty::transformer_block x N, gradient + Adam",
            "variables": "N scalar variables, Momentum"}[mode]
    if "--nvcc" in args and rounds > 1:
        sys.exit("--rounds times g++ or clang series, not --nvcc")
    if "--nvcc" in args:
        nvcc = os.environ.get("NVCC", "/usr/local/cuda/bin/nvcc")
        print(f"| {what} | nvcc -O2 s | of which cicc s | peak MiB |")
        print("|---:|---:|---:|---:|")
        for n in sizes:
            secs, mib, cicc = measure(n, cxx, mode, nvcc)
            print(f"| {n} | {secs:.1f} | {cicc:.1f} | {mib:.0f} |", flush=True)
        return
    # The last two columns: what each layer added since the row before (the slope that must
    # stay flat for a linear front end).
    # --debug: as a Debug build compiles the program (-O0 -g), where debug records cost memory.
    # --syntax-only: the front end alone (its peak is not lowered by what the back end frees).
    if "--debug" in args and "--syntax-only" in args:
        sys.exit("--debug and --syntax-only are two different compiles: pick one")
    opt = "-O0 -g" if "--debug" in args else "-O2 -fsyntax-only" if "--syntax-only" in args else "-O2"
    if rounds > 1:
        series_in_rounds(sizes, rounds, what, cxx, mode, opt)
        return
    print(f"| {what} | compile s ({cxx} {opt}) | peak MiB | s per added layer "
          "| MiB per added layer |")
    print("|---:|---:|---:|---:|---:|")
    prev = None
    for n in sizes:
        secs, _, mib = measure(n, cxx, mode, opt=opt)
        slope = "" if prev is None else (f"{(secs - prev[1]) / (n - prev[0]):.2f} | "
                                         f"{(mib - prev[2]) / (n - prev[0]):.0f}")
        print(f"| {n} | {secs:.1f} | {mib:.0f} | {slope or ' | '} |", flush=True)
        prev = (n, secs, mib)


def deep_transformer(cxx: str, rounds: int) -> None:
    """test/deep/transformer_model.cpp compiled as CTest's build.deep_transformer compiles it."""
    defs = []
    found = {"TYPEFLOW_HAS_ONEDNN": pathlib.Path("/usr/include/oneapi/dnnl/dnnl.h"),
             "TYPEFLOW_HAS_ZLIB": pathlib.Path("/usr/include/zlib.h"),
             "TYPEFLOW_HAS_CUDA": pathlib.Path("/usr/local/cuda/include/cuda_runtime.h"),
             "TYPEFLOW_HAS_CUDNN": pathlib.Path("/usr/local/cuda/include/cudnn_version.h")}
    for name, header in found.items():
        if header.exists():
            defs.append(f"-D{name}=1")
    blas = pathlib.Path("/usr/include/x86_64-linux-gnu/openblas-pthread")
    if (blas / "cblas.h").exists():
        defs += ["-DTYPEFLOW_HAS_CBLAS=1", f"-isystem{blas}"]
    if found["TYPEFLOW_HAS_CUDA"].exists():
        defs.append("-isystem/usr/local/cuda/include")
    opt = "-O2 -Wall -Wextra -Wpedantic -Werror -fopenmp"
    print(f"| test/deep/transformer_model.cpp ({cxx} {opt}) | wall s | user s | peak MiB |")
    print("|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            wall, user, mib = compile_file(ROOT / "test" / "deep" / "transformer_model.cpp", cxx,
                                           opt, pathlib.Path(tmp) / "deep.o", defs)
            print(f"| run {r + 1} | {wall:.1f} | {user:.1f} | {mib:.0f} |", flush=True)
    print(f"\n({' '.join(d for d in defs if d.startswith('-D')) or 'no optional dependency'})")


def series_in_rounds(sizes: list, rounds: int, what: str, cxx: str, mode: str, opt: str) -> None:
    """A series compiled `rounds` times in turn; each size's fastest run, and the linearity rule."""
    runs: dict = {n: [] for n in sizes}
    for r in range(rounds):
        for n in (sizes if r % 2 == 0 else sizes[::-1]):
            runs[n].append(measure(n, cxx, mode, opt=opt))
            wall, user, mib = runs[n][-1]
            print(f"round {r + 1}: {n}: {wall:.1f} s wall, {user:.1f} s user, {mib:.0f} MiB",
                  file=sys.stderr, flush=True)
    best = {n: (min(u for _, u, _ in runs[n]), max(m for _, _, m in runs[n])) for n in sizes}
    print(f"| {what} | user s ({cxx} {opt}, fastest of {rounds}) | wall s, every run | peak MiB "
          "| user s per added layer | MiB per added layer |")
    print("|---:|---:|---:|---:|---:|---:|")
    slopes = []
    for k, n in enumerate(sizes):
        walls = ", ".join(f"{w:.1f}" for w, _, _ in runs[n])
        slope = " | "
        if k > 0:
            m = sizes[k - 1]
            slopes.append(((best[n][0] - best[m][0]) / (n - m), (best[n][1] - best[m][1]) / (n - m),
                           f"{m} to {n}"))
            slope = f"{slopes[-1][0]:.2f} | {slopes[-1][1]:.0f}"
        print(f"| {n} | {best[n][0]:.1f} | {walls} | {best[n][1]:.0f} | {slope} |")
    if len(slopes) >= 2:
        (t0, m0, i0), (t1, m1, i1) = slopes[0], slopes[-1]

        def ratio(last: float, first: float) -> str:
            return (f"{last / first:.2f}x" if first > 0 else
                    "no ratio (the first interval's cost is not above zero: within the noise)")
        print(f"\nA layer from {i1} over one from {i0}: {ratio(t1, t0)} in time, {ratio(m1, m0)} in "
              "memory (issue 43: linear is at most 1.2x).")


if __name__ == "__main__":
    main()
