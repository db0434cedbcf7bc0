"""Shared by bench/peers/examples_jax.py and examples_tf.py, the JAX and TensorFlow peers of the
example-step races (bench/gpt_step.py, lstm_step.py, resnet_step.py): the models' sizes, the
command line, and the timing, sanity check and JSON line each script prints."""
import argparse
import json
import math
import statistics
import sys
import time

from common import pin_cpus  # noqa: F401  (re-exported: the scripts pin before their import)

MODELS = ("gpt", "lstm", "resnet")
BATCH = {"gpt": 32, "lstm": 32, "resnet": 128}
# examples/gpt: vocabulary, context, width, heads, MLP width, blocks; Adam's learning rate
GPT = dict(vocab=128, context=32, width=64, heads=2, hidden=256, blocks=2, lr=3e-3)
# examples/lstm: vocabulary, embedding, units, sequence length
LSTM = dict(vocab=128, embed=32, units=256, length=64, lr=3e-3)
# examples/resnet: Fashion-MNIST's 28x28x1 images, 10 classes, (filters, stride) per residual
# block (two blocks per stage)
RESNET = dict(size=28, classes=10,
              stages=((16, 1), (16, 1), (32, 2), (32, 1), (64, 2), (64, 1)), lr=2e-3)
# torch.optim.Adam's defaults, which the PyTorch peers use
BETA1, BETA2, EPS = 0.9, 0.999, 1e-8


def parse_args(modes):
    p = argparse.ArgumentParser(description=sys.modules["__main__"].__doc__.splitlines()[0])
    p.add_argument("--model", choices=MODELS, required=True)
    p.add_argument("--mode", choices=modes, default=modes[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=40, help="timed steps (their median is printed)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (the first compiles)")
    p.add_argument("--batch", type=int, default=None, help="default: 32 (gpt, lstm), 128 (resnet)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.batch is None:
        args.batch = BATCH[args.model]
    if args.warmup < 1 or args.steps < 1:
        p.error("--warmup and --steps must be at least 1")
    return args


def run(step, peer, version, args, **extra) -> int:
    """Times step() (one whole training step on the fixed batch; returns its loss as a Python
    float, so the step has finished): args.warmup untimed steps (the first one traces and
    compiles: its seconds are printed as first_step_s), then args.steps timed ones. Prints one
    JSON line with their median (step_s); returns 1 (after printing) when the losses are not
    finite or the last timed step's is not below the first step's, else 0."""
    start = time.perf_counter()
    losses = [step()]
    first = time.perf_counter() - start
    for _ in range(args.warmup - 1):
        losses.append(step())
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        losses.append(step())
        times.append(time.perf_counter() - start)
    ok = all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
    print(json.dumps({"peer": peer, "model": args.model, "step_s": statistics.median(times),
                      "min_s": min(times), "steps": len(times), "first_step_s": round(first, 3),
                      "batch": args.batch, "threads": args.threads, "version": version,
                      "loss_first": round(losses[0], 5), "loss_last": round(losses[-1], 5),
                      "ok": ok, **extra}), flush=True)
    if not ok:
        print(f"{peer} {args.model}: the loss did not decrease ({losses[0]} .. {losses[-1]})",
              file=sys.stderr)
        return 1
    return 0
