"""A stand-in CPU peer for bench.race (test/bench/race_test.py): serves bench/peers/common.py's
race protocol with a "training step" that sleeps $FAKE_PEER_SLEEP seconds and returns a falling
loss (--mode sleep), or returns NaN (--mode nan: its sanity check fails)."""
import itertools
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "peers"))
import common  # noqa: E402

args = common.parse_args(["sleep", "nan"])
count = itertools.count()
pause = float(os.environ.get("FAKE_PEER_SLEEP", "0.001"))


def step():
    if args.mode == "nan":
        return math.nan
    time.sleep(pause)
    return 3.0 - 0.01 * next(count)


common.finish(args, step, f"fake-{args.mode}", "0", common.sanity(step), threads=args.threads)
