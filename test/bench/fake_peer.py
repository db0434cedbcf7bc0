"""A stand-in CPU peer for bench.race (test/bench/race_test.py): serves bench/peers/common.py's
race protocol with a "training step" that sleeps --mode seconds and returns a falling loss (or,
with --mode nan, a NaN: its sanity check fails)."""
import itertools
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "peers"))
import common  # noqa: E402

args = common.parse_args(["0.001", "1.0", "nan"])
count = itertools.count()


def step():
    if args.mode == "nan":
        return math.nan
    time.sleep(float(args.mode))
    return 3.0 - 0.01 * next(count)


common.finish(args, step, f"fake-{args.mode}", "0", common.sanity(step), threads=args.threads)
