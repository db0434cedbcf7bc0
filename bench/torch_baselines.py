#!/usr/bin/python3
"""PyTorch eager baselines for bench/run (issue 7's side-by-side benchmarks).

Runs on the CPU with torch.set_num_threads(T) and one inter-op thread, and writes one JSON
object: {"torch": version, "threads": T, "min_time": s, "repeats": r, "results": [record...]}
with records {"name", "seconds" (per iteration, median of the repeats), "bytes_per_second" or
"items_per_second", and for the conv and model cases a "note"}. Each case is run once to warm
up, then n iterations are timed per repeat, n chosen so that one repeat lasts >= --min-time.

Cases (the names bench/run matches against the typeflow benchmarks):
  torch_fma/N, torch_sin/N   a*b + c*d and a*b + c*sin(d), float32, N in 2^20, 2^22, 2^24;
                             bytes/s = 5*N*4 / s (eager: every temporary and the result are
                             allocated on each call, as eager PyTorch does)
  torch_{sum,max}_{all,axis0,axis1}
                             x.sum(), x.max(), x.sum(0), x.sum(1), x.amax(0), x.amax(1) of a
                             float32 [8192, 8192] tensor; bytes/s = 8192*8192*4 / s
  torch_sum_narrow0          x.view(-1, 32).sum(0) of the same tensor (a bias gradient's
                             shape, [2097152, 32] over its rows)
  torch_conv{1,2}_{fwd,bwd}  F.conv2d without bias, 5x5, stride 1, padding 2 (SAME), batch 128:
                             conv1 [128,1,28,28] -> 32 channels, conv2 [128,32,14,14] -> 64.
                             bwd times only the backward: the forward runs once outside the
                             timed region and torch.autograd.grad(y, inputs, dy,
                             retain_graph=True) is timed (conv1: filter gradient only, the input
                             does not require grad; conv2: input and filter gradients).
                             items/s = FLOP/s, fwd FLOP = 2*N*OH*OW*KH*KW*C*O, bwd = fwd FLOP x
                             the number of gradients (1 for conv1, 2 for conv2). Both memory
                             formats (contiguous NCHW and channels_last) are measured and the
                             faster one is reported; "note" says which.
  torch_train_step           the seed model (examples/mnist/model.hpp), batch 128: zero_grad,
                             forward, backward, SGD momentum 0.9 nesterov lr 0.01 step;
                             items/s = images/s
  torch_forward              forward + loss under torch.no_grad(); items/s = images/s

Usage: /usr/bin/python3 bench/torch_baselines.py [--threads T] [--min-time S] [--repeats R]
                                                 [--only PREFIX ...] [--out FILE]
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

BATCH = 128
WEIGHT_DECAY = 1e-4  # mnist::weight_decay: decay * l2_loss(w) = decay * sum(w^2) / 2


def timeit(fn, min_time: float, repeats: int) -> float:
    """Median over `repeats` of the per-iteration seconds of n calls, n such that one repeat
    lasts >= min_time (after one warm-up call and a calibration)."""
    fn()  # warm-up (allocator, oneDNN primitive caches, lazy initialisation)
    start = time.perf_counter()
    fn()
    one = max(time.perf_counter() - start, 1e-9)
    n = max(1, math.ceil(min_time / one))
    samples = []
    while len(samples) < repeats:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed < min_time and not samples:  # calibration call was not representative
            n = max(n + 1, math.ceil(n * min_time / max(elapsed, 1e-9) * 1.1))
            continue
        samples.append(elapsed / n)
    return statistics.median(samples)


def record(name, seconds, *, bytes_=None, items=None, note=None):
    r = {"name": name, "seconds": seconds}
    if bytes_ is not None:
        r["bytes_per_second"] = bytes_ / seconds
    if items is not None:
        r["items_per_second"] = items / seconds
    if note:
        r["note"] = note
    return r


def elementwise(args, out):
    for n in (1 << 20, 1 << 22, 1 << 24):
        g = torch.Generator().manual_seed(n)
        a, b, c, d = (torch.rand(n, generator=g) for _ in range(4))
        cases = {
            "torch_fma": lambda: a * b + c * d,
            "torch_sin": lambda: a * b + c * torch.sin(d),
        }
        for prefix, fn in cases.items():
            name = f"{prefix}/{n}"
            if selected(args, name):
                out.append(record(name, timeit(fn, args.min_time, args.repeats), bytes_=5 * n * 4))


def reductions(args, out):
    cases = {
        "torch_sum_all": lambda x: x.sum(),
        "torch_max_all": lambda x: x.max(),
        "torch_sum_axis0": lambda x: x.sum(0),
        "torch_sum_axis1": lambda x: x.sum(1),
        "torch_max_axis0": lambda x: x.amax(0),
        "torch_max_axis1": lambda x: x.amax(1),
        "torch_sum_narrow0": lambda x: x.view(-1, 32).sum(0),
    }
    if not any(selected(args, name) for name in cases):
        return
    x = torch.rand(8192, 8192, generator=torch.Generator().manual_seed(7))
    for name, fn in cases.items():
        if selected(args, name):
            out.append(record(name, timeit(lambda: fn(x), args.min_time, args.repeats),
                              bytes_=x.numel() * 4))


FORMATS = {"contiguous (NCHW)": torch.contiguous_format, "channels_last": torch.channels_last}


def best_format(make_fn, args):
    """Times make_fn(memory_format)() for both memory formats; returns (seconds, note)."""
    times = {label: timeit(make_fn(fmt), args.min_time, args.repeats)
             for label, fmt in FORMATS.items()}
    best = min(times, key=times.get)
    other = next(label for label in times if label != best)
    return times[best], f"{best} (faster; {other}: {times[other] * 1e3:.2f} ms)"


def conv(args, out):
    layers = {"torch_conv1": (1, 28, 32), "torch_conv2": (32, 14, 64)}
    for prefix, (c, hw, o) in layers.items():
        flops = 2 * BATCH * hw * hw * 5 * 5 * c * o  # SAME, stride 1: OH = OW = hw
        g = torch.Generator().manual_seed(c)
        x0 = torch.rand(BATCH, c, hw, hw, generator=g)
        w0 = torch.randn(o, c, 5, 5, generator=g) * 0.05
        dy0 = torch.randn(BATCH, o, hw, hw, generator=g)

        if selected(args, prefix + "_fwd"):
            def fwd(fmt, x0=x0, w0=w0):
                x = x0.contiguous(memory_format=fmt)
                w = w0.contiguous(memory_format=fmt)
                return lambda: F.conv2d(x, w, padding=2)
            secs, note = best_format(fwd, args)
            out.append(record(prefix + "_fwd", secs, items=flops, note=note))

        if selected(args, prefix + "_bwd"):
            input_grad = prefix == "torch_conv2"

            def bwd(fmt, x0=x0, w0=w0, dy0=dy0, input_grad=input_grad):
                x = x0.contiguous(memory_format=fmt).requires_grad_(input_grad)
                w = w0.contiguous(memory_format=fmt).requires_grad_(True)
                dy = dy0.contiguous(memory_format=fmt)
                y = F.conv2d(x, w, padding=2)  # forward once, outside the timed region
                inputs = (x, w) if input_grad else (w,)
                return lambda: torch.autograd.grad(y, inputs, dy, retain_graph=True)
            secs, note = best_format(bwd, args)
            grads = 2 if input_grad else 1
            what = "input + filter gradients" if input_grad else "filter gradient"
            out.append(record(prefix + "_bwd", secs, items=flops * grads,
                              note=f"{note}; backward only ({what}), forward outside the timing"))


class SeedModel(torch.nn.Module):
    """examples/mnist/model.hpp: conv 5x5x32 SAME + bias + relu, max-pool 2x2/2, conv 5x5x64
    SAME + bias + relu, max-pool 2x2/2, fc 7*7*64 -> 1024 + relu, 1024 -> 10 + relu, 10 -> 10."""

    def __init__(self, channels_last: bool):
        super().__init__()
        self.channels_last = channels_last

        def trunc(*shape, std):
            return torch.nn.Parameter(torch.nn.init.trunc_normal_(torch.empty(*shape), std=std,
                                                                  a=-2 * std, b=2 * std))

        self.w1 = trunc(32, 1, 5, 5, std=5e-2)
        self.b1 = torch.nn.Parameter(torch.zeros(32))
        self.w2 = trunc(64, 32, 5, 5, std=5e-2)
        self.b2 = torch.nn.Parameter(torch.full((64,), 0.1))
        self.w3 = trunc(1024, 7 * 7 * 64, std=0.04)
        self.b3 = torch.nn.Parameter(torch.full((1024,), 0.1))
        self.w4 = trunc(10, 1024, std=0.04)
        self.b4 = torch.nn.Parameter(torch.full((10,), 0.1))
        self.w5 = trunc(10, 10, std=1 / 192.0)
        self.b5 = torch.nn.Parameter(torch.zeros(10))
        if channels_last:
            for p in (self.w1, self.w2):
                p.data = p.data.contiguous(memory_format=torch.channels_last)

    def forward(self, images):
        h = F.max_pool2d(F.relu(F.conv2d(images, self.w1, self.b1, padding=2)), 2, 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, self.w2, self.b2, padding=2)), 2, 2)
        # Flatten without a copy in either layout (the weights are random, so the order of
        # the 7*7*64 features does not matter for speed): NHWC order for channels_last.
        h = h.permute(0, 2, 3, 1) if self.channels_last else h
        h = h.reshape(h.shape[0], -1)
        h = F.relu(F.linear(h, self.w3, self.b3))
        h = F.relu(F.linear(h, self.w4, self.b4))
        return F.linear(h, self.w5, self.b5)

    def loss(self, images, labels):
        ce = F.cross_entropy(self(images), labels)  # mean sparse softmax cross-entropy
        l2 = (self.w3.square().sum() + self.w4.square().sum()) / 2  # tf.nn.l2_loss
        return ce + WEIGHT_DECAY * l2


def model(args, out):
    g = torch.Generator().manual_seed(42)
    images0 = torch.rand(BATCH, 1, 28, 28, generator=g)
    labels = torch.randint(0, 10, (BATCH,), generator=g)

    def setup(fmt):
        net = SeedModel(fmt == torch.channels_last)
        images = images0.contiguous(memory_format=fmt)
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, nesterov=True)
        return net, images, opt

    if selected(args, "torch_train_step"):
        def train(fmt):
            net, images, opt = setup(fmt)

            def step():
                opt.zero_grad()
                net.loss(images, labels).backward()
                opt.step()
            return step
        secs, note = best_format(train, args)
        out.append(record("torch_train_step", secs, items=BATCH,
                          note=f"{note}; zero_grad + forward + backward + SGD(nesterov) step"))

    if selected(args, "torch_forward"):
        def forward(fmt):
            net, images, _ = setup(fmt)

            def run():
                with torch.no_grad():
                    return net.loss(images, labels)
            return run
        secs, note = best_format(forward, args)
        out.append(record("torch_forward", secs, items=BATCH,
                          note=f"{note}; forward + loss under torch.no_grad()"))


def selected(args, name):
    return not args.only or any(name.startswith(p) for p in args.only)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--min-time", type=float, default=0.5,
                   help="seconds each timed repeat lasts at least (default 0.5)")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats, median (default 3)")
    p.add_argument("--only", nargs="*", default=[], help="run only cases with these prefixes")
    p.add_argument("--out", help="write the JSON here instead of stdout")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # only allowed before any inter-op parallel work
    torch.manual_seed(0)

    results = []
    for group in (elementwise, reductions, conv, model):
        group(args, results)
        for r in results:
            if r.get("_printed"):
                continue
            rate = r.get("bytes_per_second", r.get("items_per_second"))
            print(f"  {r['name']}: {r['seconds'] * 1e3:.3f} ms/iter, {rate:.4g}/s",
                  file=sys.stderr, flush=True)
            r["_printed"] = True
    for r in results:
        r.pop("_printed", None)

    doc = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "min_time": args.min_time,
        "repeats": args.repeats,
        "results": results,
    }
    text = json.dumps(doc, indent=2)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
