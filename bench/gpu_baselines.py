#!/usr/bin/env python3
"""GPU baselines for bench/gpu.cu (issue 20): the seed model's training step at batch 128 in
PyTorch eager, PyTorch torch.compile(mode="reduce-overhead") and JAX jit, on the same GPU.

The model and loss are bench/torch_baselines.py's SeedModel (examples/mnist/model.hpp): conv
5x5x32 SAME + bias + relu, max-pool, conv 5x5x64, max-pool, fc 3136 -> 1024 + relu, 1024 -> 10 +
relu, 10 -> 10, mean sparse softmax cross-entropy + 1e-4 * l2_loss of the two wide fc weights;
SGD momentum 0.9 Nesterov, lr 0.01. The JAX version is the same function written with
jax.lax.conv_general_dilated (NHWC, as typeflow) and optax-free Nesterov momentum.

Timing: after warm-up steps, `steps` steps are run back to back and timed with the GPU
synchronised at both ends, `repeats` times; the median per-step time is printed. Inputs live on
the GPU (a step does not copy its batch from the host). float32 throughout; PyTorch's defaults
for TF32 are kept (convolutions may use TF32, matmuls do not), and printed.

Usage (on the GPU machine): python3 bench/gpu_baselines.py [--steps 200] [--repeats 5]
                                                          [--out FILE.json]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_baselines import BATCH, WEIGHT_DECAY, SeedModel  # noqa: E402


def time_steps(step, sync, steps, repeats, warmup=20):
    for _ in range(warmup):
        step()
    sync()
    samples = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        samples.append((time.perf_counter() - start) / steps)
    return statistics.median(samples), samples


def torch_cases(args, out):
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(42)
    images0 = torch.rand(BATCH, 1, 28, 28, generator=g).to(dev)
    labels = torch.randint(0, 10, (BATCH,), generator=g).to(dev)
    for channels_last in (False, True):
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        layout = "channels_last" if channels_last else "NCHW"
        for mode in ("eager", "compile-reduce-overhead"):
            torch.manual_seed(0)
            net = SeedModel(channels_last).to(dev)
            images = images0.contiguous(memory_format=fmt)
            compiled = mode != "eager"
            # Eager: PyTorch's default SGD (multi-tensor). Compiled: forward and backward
            # through torch.compile(mode="reduce-overhead") (Inductor kernels replayed as CUDA
            # graphs; the backward too, by AOTAutograd) and the fused SGD kernel.
            opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, nesterov=True,
                                  fused=True if compiled else None)
            loss_fn = torch.compile(net.loss, mode="reduce-overhead") if compiled else net.loss

            def step(opt=opt, images=images, loss_fn=loss_fn, compiled=compiled):
                if compiled:
                    torch.compiler.cudagraph_mark_step_begin()
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(images, labels)
                loss.backward()
                opt.step()
                return loss

            secs, samples = time_steps(step, torch.cuda.synchronize, args.steps, args.repeats,
                                       warmup=30)
            name = f"torch_{mode}_{layout}"
            out.append({"name": name, "seconds": secs, "images_per_second": BATCH / secs,
                        "samples": samples})
            print(f"  {name}: {secs * 1e3:.4f} ms/step, {BATCH / secs:,.0f} images/s",
                  file=sys.stderr, flush=True)


def jax_case(args, out):
    try:
        import jax
        import jax.numpy as jnp
    except Exception as e:  # pragma: no cover - reported, not fatal
        print(f"  jax: not available ({e})", file=sys.stderr)
        return
    key = jax.random.PRNGKey(0)
    ks = jax.random.split(key, 8)

    def trunc(k, shape, std):
        return jax.random.truncated_normal(k, -2.0, 2.0, shape, jnp.float32) * std

    params = {
        "w1": trunc(ks[0], (5, 5, 1, 32), 5e-2), "b1": jnp.zeros(32),
        "w2": trunc(ks[1], (5, 5, 32, 64), 5e-2), "b2": jnp.full(64, 0.1),
        "w3": trunc(ks[2], (7 * 7 * 64, 1024), 0.04), "b3": jnp.full(1024, 0.1),
        "w4": trunc(ks[3], (1024, 10), 0.04), "b4": jnp.full(10, 0.1),
        "w5": trunc(ks[4], (10, 10), 1 / 192.0), "b5": jnp.zeros(10),
    }
    moms = jax.tree_util.tree_map(jnp.zeros_like, params)
    images = jax.random.uniform(ks[5], (BATCH, 28, 28, 1), jnp.float32)
    labels = jax.random.randint(ks[6], (BATCH,), 0, 10)
    dn = ("NHWC", "HWIO", "NHWC")

    def pool(x):
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "SAME")

    def loss_fn(p, x, y):
        h = jax.lax.conv_general_dilated(x, p["w1"], (1, 1), "SAME", dimension_numbers=dn)
        h = pool(jax.nn.relu(h + p["b1"]))
        h = jax.lax.conv_general_dilated(h, p["w2"], (1, 1), "SAME", dimension_numbers=dn)
        h = pool(jax.nn.relu(h + p["b2"]))
        h = h.reshape(h.shape[0], -1)
        h = jax.nn.relu(h @ p["w3"] + p["b3"])
        h = jax.nn.relu(h @ p["w4"] + p["b4"])
        logits = h @ p["w5"] + p["b5"]
        ce = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1))
        l2 = (jnp.sum(p["w3"] ** 2) + jnp.sum(p["w4"] ** 2)) / 2
        return ce + WEIGHT_DECAY * l2

    @jax.jit
    def step(p, m, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        m = jax.tree_util.tree_map(lambda mi, gi: 0.9 * mi + gi, m, g)
        p = jax.tree_util.tree_map(lambda pi, gi, mi: pi - 0.01 * (gi + 0.9 * mi), p, g, m)
        return p, m, loss

    state = {"p": params, "m": moms}

    def run():
        state["p"], state["m"], state["loss"] = step(state["p"], state["m"], images, labels)

    def sync():
        if "loss" in state:
            state["loss"].block_until_ready()

    secs, samples = time_steps(run, sync, args.steps, args.repeats, warmup=30)
    out.append({"name": "jax_jit", "seconds": secs, "images_per_second": BATCH / secs,
                "samples": samples, "jax": jax.__version__})
    print(f"  jax_jit: {secs * 1e3:.4f} ms/step, {BATCH / secs:,.0f} images/s", file=sys.stderr,
          flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out")
    args = p.parse_args()
    results = []
    torch_cases(args, results)
    jax_case(args, results)
    doc = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
           "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
           "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32, "batch": BATCH,
           "results": results}
    text = json.dumps(doc, indent=2)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
