"""Shared by bench/peers/train_step_*.py: the seed model's hyper-parameters, a fixed random batch,
the sanity check, the timing and the JSON line each script prints, or with --serve the turns it
runs for bench/run's interleaved race (serve())."""
import argparse
import json
import math
import os
import random
import statistics
import sys
import time

BATCH = 128
LR, MOMENTUM = 0.01, 0.9
WEIGHT_DECAY = 1e-4  # model.hpp: + 1e-4 * l2_loss(w) of local3 and local4, l2_loss = sum(w^2) / 2


def parse_args(modes):
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=modes, default=modes[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=50, help="timed steps, median (>= 30)")
    p.add_argument("--serve", action="store_true",
                   help="after the sanity check and the warm-up, print one JSON line with "
                        "\"ready\", then run turns read from stdin (see serve())")
    return p.parse_args()


def pin_cpus(threads):
    """Restricts the process to its first `threads` CPUs (done before the framework starts, whose
    thread pools are sized from the affinity mask)."""
    cpus = sorted(os.sched_getaffinity(0))[:threads]
    os.sched_setaffinity(0, cpus)
    return cpus


def batch(seed=42):
    """Images NHWC [128, 28, 28, 1] in [0, 1) as a flat list, labels in [0, 10)."""
    rng = random.Random(seed)
    return [rng.random() for _ in range(BATCH * 28 * 28)], [rng.randrange(10) for _ in range(BATCH)]


def sanity(step, n=5):
    """The losses of the first n steps on the fixed batch: finite and decreasing."""
    losses = [float(step()) for _ in range(n)]
    finite = all(math.isfinite(v) for v in losses)
    return {"losses": [round(v, 5) for v in losses], "finite": finite,
            "decreasing": finite and losses[-1] < losses[0]}


def measure(step, warmup, steps):
    """Seconds of each of `steps` steps after `warmup` untimed ones; step() returns the loss as a
    Python float (so the step has finished)."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times


def emit(peer, version, times, check, **extra):
    ms = statistics.median(times) * 1e3
    print(json.dumps({"peer": peer, "version": version, "ms_median": round(ms, 3),
                      "images_per_s": round(BATCH / ms * 1e3, 1), "steps": len(times),
                      "ms_min": round(min(times) * 1e3, 3), "sanity": check,
                      "ok": check["decreasing"], **extra}), flush=True)


def serve(step, warmup, peer, version, check, **extra):
    """bench/run's interleaved race: after `warmup` untimed steps, prints one JSON line (the
    peer, its version, the sanity check, "ready": true), then for each line "run N" read from
    stdin runs N steps and prints {"times": [seconds of each]}; stops at "quit" or the end of
    its input."""
    for _ in range(warmup):
        step()
    print(json.dumps({"ready": True, "peer": peer, "version": version, "sanity": check,
                      "ok": check["decreasing"], **extra}), flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        if words[0] == "run" and len(words) == 2 and words[1].isdigit() and int(words[1]) > 0:
            print(json.dumps({"times": measure(step, 0, int(words[1]))}), flush=True)
        else:
            print(json.dumps({"error": f"unknown command {line.strip()!r}"}), flush=True)


def finish(args, step, peer, version, check, **extra):
    """The script's last call: serve() with --serve, else time args.steps steps and emit()."""
    if args.serve:
        serve(step, args.warmup, peer, version, check, **extra)
    else:
        emit(peer, version, measure(step, args.warmup, args.steps), check, **extra)
