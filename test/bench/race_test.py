"""bench.race: bench/run's interleaved race, end to end on the real typeflow step and stand-in
peers (test/bench/fake_peer.py). Usage: race_test.py BUILD_DIR (the build folder holding
bench/train_step). Checks the race protocol of train_step --serve, that run_race() records a
median step for every contestant in every round, and race_table()'s verdict: typeflow's step
(about 0.1 s on one thread) beats a peer that sleeps 1 s, loses to one that sleeps 1 ms, and a
peer whose sanity check fails is never the fastest."""
import importlib.machinery
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
build = pathlib.Path(sys.argv[1]).resolve()
failures = []


def check(ok, what):
    print(("ok:   " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


# The protocol, by hand.
env = dict(os.environ, TYPEFLOW_BENCH_THREADS="1")
done = subprocess.run([str(build / "bench" / "train_step"), "--serve"], input="run 2\nbogus\nquit\n",
                      capture_output=True, text=True, env=env, timeout=300)
lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
check(done.returncode == 0, f"train_step --serve exits 0 (got {done.returncode})")
check(len(lines) == 3, f"three JSON lines: ready, times, error (got {len(lines)})")
if len(lines) == 3:
    ready, turn, err = lines
    check(ready.get("ready") is True and ready.get("peer") == "typeflow", "the ready line")
    losses = (ready.get("sanity") or {}).get("losses") or []
    check(len(losses) == 5 and losses[-1] < losses[0] and ready.get("ok") is True,
          f"the sanity check: 5 falling losses (got {losses})")
    times = turn.get("times") or []
    check(len(times) == 2 and all(t > 0 for t in times), f"run 2 times two steps (got {times})")
    check("error" in err, "an unknown command is answered with an error")

# run_race() and race_table() with stand-in peers.
loader = importlib.machinery.SourceFileLoader("bench_run", str(ROOT / "bench" / "run"))
spec = importlib.util.spec_from_loader("bench_run", loader)
run = importlib.util.module_from_spec(spec)
loader.exec_module(run)
with tempfile.TemporaryDirectory() as tmp:
    tmp = pathlib.Path(tmp)
    (tmp / "venv-fake" / "bin").mkdir(parents=True)
    (tmp / "venv-fake" / "bin" / "python").symlink_to(sys.executable)
    (tmp / "bench").mkdir()
    (tmp / "bench" / "train_step").symlink_to(build / "bench" / "train_step")
    peer = str(pathlib.Path("..", "..", "test", "bench", "fake_peer.py"))
    run.DEPS = tmp
    run.RACE_STEPS, run.RACE_PAUSE_S, run.RACE_TIMEOUT_S = 3, 0.05, 300
    run.PEERS = [("slow", "slow peer", "venv-fake", peer, ["--mode", "1.0"]),
                 ("broken", "broken peer", "venv-fake", peer, ["--mode", "nan"])]
    status = {}
    run.run_race(tmp, 1, True, status)
    race = json.loads((tmp / "race.json").read_text())
    ms = {k: v["ms"] for k, v in race["contestants"].items()}
    check(set(ms) == {"typeflow", "slow", "broken"}, f"three contestants ran (got {set(ms)})")
    check(all(len(v) == race["rounds"] == 3 and all(x and x > 0 for x in v) for v in ms.values()),
          f"a median step for each in each of 3 rounds (got {ms})")
    rows, verdict = run.race_table(race, None)
    check(verdict is True, "typeflow beats a peer sleeping 1 s (the broken peer does not count)")
    check(any(r[0] == "broken peer" and "sanity" in r[-1] for r in rows),
          "the broken peer's row says its sanity check failed")
    # The same race seen against a fast peer: typeflow loses.
    fast = json.loads(json.dumps(race))
    fast["contestants"]["slow"]["ms"] = [1.0] * 3
    check(run.race_table(fast, None)[1] is False, "typeflow loses to a peer 1 ms a step")
    check(run.race_table({"contestants": {"typeflow": race["contestants"]["typeflow"]}}, None)[1]
          is None, "no verdict without a peer")

sys.exit(1 if failures else 0)
