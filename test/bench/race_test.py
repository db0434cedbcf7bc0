"""bench.race: bench/run's interleaved race, end to end on the real typeflow step and stand-in
peers (test/bench/fake_peer.py). Usage: race_test.py TRAIN_STEP (the bench/train_step
executable). Checks the protocol of train_step --serve (a ready line with a falling loss, timed
turns, errors for malformed commands), that run_race() records a median step for every
contestant in every round, and race_table()'s verdict: typeflow's step beats a peer that sleeps
four times its longest step, loses to one that sleeps 1 ms, and a peer whose sanity check fails is
never the fastest; and bench/race.py (the race alone, its peers from any interpreter)."""
import importlib.machinery
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
train_step = pathlib.Path(sys.argv[1]).resolve()
failures = []


def check(ok, what):
    print(("ok:   " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


# The protocol, by hand.
env = dict(os.environ, TYPEFLOW_BENCH_THREADS="1")
script = "run 2\nrun 0\nrun -1\nrun 2x\nbogus\n quit \nrun 1\n"
done = subprocess.run([str(train_step), "--serve"], input=script, capture_output=True, text=True,
                      env=env, timeout=300)
lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
check(done.returncode == 0, f"train_step --serve exits 0 (got {done.returncode})")
check(len(lines) == 6, "six JSON lines: ready, times, four errors, nothing after quit "
      f"(got {len(lines)})")
longest = 1.0
if len(lines) == 6:
    ready, turn, *errors = lines
    check(ready.get("ready") is True and ready.get("peer") == "typeflow", "the ready line")
    losses = (ready.get("sanity") or {}).get("losses") or []
    check(len(losses) == 5 and losses[-1] < losses[0] and ready.get("ok") is True,
          f"the sanity check: 5 falling losses (got {losses})")
    times = turn.get("times") or []
    check(len(times) == 2 and all(t > 0 for t in times), f"run 2 times two steps (got {times})")
    check(all("error" in e for e in errors), "run 0, run -1, run 2x and bogus are errors")
    longest = max(times + [0.1])

# run_race() and race_table() with stand-in peers.
loader = importlib.machinery.SourceFileLoader("bench_run", str(ROOT / "bench" / "run"))
spec = importlib.util.spec_from_loader("bench_run", loader)
run = importlib.util.module_from_spec(spec)
loader.exec_module(run)
peer = str(pathlib.Path("..", "..", "test", "bench", "fake_peer.py"))


def race(sleep: float, with_broken: bool):
    """Runs the race of typeflow, a peer sleeping `sleep` s a step and, if asked, a peer whose
    sanity check fails; returns race.json, or None (and prints why)."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        (tmp / "venv-fake" / "bin").mkdir(parents=True)
        (tmp / "venv-fake" / "bin" / "python").symlink_to(sys.executable)
        (tmp / "bench").mkdir()
        (tmp / "bench" / "train_step").symlink_to(train_step)
        os.environ["FAKE_PEER_SLEEP"] = str(sleep)
        run.DEPS = tmp
        run.RACE_STEPS, run.RACE_PAUSE_S, run.RACE_TIMEOUT_S = 3, 0.05, 300
        run.PEERS = [("sleepy", "sleepy peer", "venv-fake", peer, ["--mode", "sleep"])]
        if with_broken:
            run.PEERS.append(("broken", "broken peer", "venv-fake", peer, ["--mode", "nan"]))
        status = {}
        run.run_race(tmp, 1, True, status)
        path = tmp / "race.json"
        if status or not path.exists():
            print("status:", status)
            print((tmp / "race.log").read_text()[-4000:] if (tmp / "race.log").exists() else "")
        return json.loads(path.read_text()) if path.exists() else None


slow = race(4 * longest, True)  # (its sleep is CTest time with a core idle)
check(slow is not None, "the race ran")
if slow:
    ms = {k: v["ms"] for k, v in slow["contestants"].items()}
    check(set(ms) == {"typeflow", "sleepy", "broken"}, f"three contestants ran (got {set(ms)})")
    check(all(len(v) == slow["rounds"] == 3 and all(x and x > 0 for x in v) for v in ms.values()),
          f"a median step for each in each of 3 rounds (got {ms})")
    rows, verdict = run.race_table(slow)
    check(verdict is True, "typeflow beats a peer 4x slower (the broken peer does not count)")
    check(any(r[0] == "broken peer" and "sanity" in r[-1] for r in rows),
          "the broken peer's row says its sanity check failed")
    check(run.race_table({"contestants": {"typeflow": slow["contestants"]["typeflow"]}})[1]
          is None, "no verdict without a peer")
    absent = json.loads(json.dumps(slow))
    absent["contestants"]["sleepy"] = {"ready": None, "ms": [], "error": "did not start"}
    check(run.race_table(absent)[1] is None, "no verdict when a peer did not start")
fast = race(0.001, False)
check(fast is not None and run.race_table(fast)[1] is False,
      "typeflow loses to a peer 1 ms a step")

# bench/race.py: the race alone, its peers from any interpreter. The "PyTorch interpreter" here
# is a wrapper, named without a path (found on PATH), that runs the sleeping stand-in whatever
# script it is given, and only with the PYTHONPATH --pythonpath gives it and no GPU visible.
with tempfile.TemporaryDirectory() as tmp:
    tmp = pathlib.Path(tmp)
    (tmp / "bin").mkdir()
    wrapper = tmp / "bin" / "stand-in-python"
    fake = ROOT / "test" / "bench" / "fake_peer.py"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"case \"$PYTHONPATH\" in {tmp} | {tmp}:*) ;; *) exit 7 ;; esac\n"
        "[ -z \"$CUDA_VISIBLE_DEVICES\" ] && [ \"$JAX_PLATFORMS\" = cpu ] || exit 8\n"
        f"exec {sys.executable} {fake} --threads 1 --serve --mode sleep\n")
    wrapper.chmod(0o755)
    env = dict(os.environ, FAKE_PEER_SLEEP=str(2 * longest),
               PATH=f"{tmp / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
               CUDA_VISIBLE_DEVICES="0", JAX_PLATFORMS="cuda")
    out = tmp / "bench"  # an OUT that looks like a build folder: its train_step stays
    out.mkdir()
    (out / "train_step").write_text("not a symlink")
    race_py = [sys.executable, str(ROOT / "bench" / "race.py"), "--train-step", str(train_step)]
    done = subprocess.run(race_py + ["--python", "torch=stand-in-python", "--pythonpath",
                                     f"torch={tmp}", "--peers", "torch-eager", "--threads",
                                     "1", "--rounds", "1", "--out", str(tmp)],
                          capture_output=True, text=True, env=env, timeout=300)
    got = json.loads((tmp / "race.json").read_text()) if (tmp / "race.json").exists() else {}
    check(done.returncode == 0, f"race.py exits 0 when typeflow wins (got {done.returncode}: "
          f"{done.stderr[-2000:]})")
    check(set(got.get("contestants", {})) == {"typeflow", "torch-eager"} and "cpu" in got,
          "race.py raced typeflow and the chosen peer only, and names the CPU (got "
          f"{sorted(got.get('contestants', {}))}, cpu {got.get('cpu')})")
    check("PyTorch eager" in done.stdout and "PASS" in done.stdout and "family" in done.stdout,
          "race.py prints the table with the CPU")
    check((out / "train_step").read_text() == "not a symlink", "race.py leaves OUT's files alone")
    for argv, says in ((["--python", "pytorch=/bin/true"], "ENV=VALUE"),
                       (["--python", "torch=no-such-python-here"], "no such interpreter")):
        bad = subprocess.run(race_py + argv, capture_output=True, text=True, env=env, timeout=60)
        check(bad.returncode != 0 and says in bad.stderr,
              f"race.py {' '.join(argv)}: an error that says {says!r} (got {bad.returncode}: "
              f"{bad.stderr[-300:]})")
sys.exit(1 if failures else 0)
