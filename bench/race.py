#!/usr/bin/env python3
"""The interleaved race of bench/run alone: typeflow's training step against the CPU peers, on a
machine where the peers are not in bench/run's environments (.deps/venv-*), for instance one
whose system Python has PyTorch and JAX, or a TensorFlow unpacked somewhere and put on
PYTHONPATH.

  bench/race.py --train-step BUILD/bench/train_step [--python ENV=INTERPRETER ...]
                [--pythonpath ENV=DIR] [--peers KEY,...] [--threads T] [--rounds R] [--out DIR]

ENV is torch, jax or tf (bench/run's environments venv-torch, venv-jax, venv-tf); INTERPRETER a
Python that can import that framework, a command on PATH or a path (default: the environment's
own, under .deps/); DIR is put in front of that interpreter's PYTHONPATH. As in bench/run, the
peers see no GPU (CUDA_VISIBLE_DEVICES empty, JAX_PLATFORMS=cpu). KEY is one of bench/run's
peers (torch-eager, torch-compile, jax-jit, tf-graph, tf-xla; default all whose interpreter
exists). The race itself, its rules and
its table are bench/run's (run_race, race_table): this script only chooses the contestants.
Writes OUT/race.json and OUT/race.log and prints the table, with the CPU it ran on, as Markdown.
Exit status 0 when typeflow won by the median ratio over the rounds, 1 when it did not, 2 when
the race decided nothing."""
import argparse
import importlib.machinery
import importlib.util
import json
import os
import pathlib
import shlex
import shutil
import stat
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def load_bench_run():
    loader = importlib.machinery.SourceFileLoader("bench_run", str(ROOT / "bench" / "run"))
    spec = importlib.util.spec_from_loader("bench_run", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def cpu_name(run) -> str:
    try:
        return run.cpu_label(pathlib.Path("/proc/cpuinfo").read_text())
    except OSError:
        return "an unknown CPU"


def pairs(values: list, what: str) -> dict:
    out = {}
    for v in values:
        key, sep, val = v.partition("=")
        if not sep or key not in ("torch", "jax", "tf") or not val:
            sys.exit(f"race.py: --{what} takes ENV=VALUE with ENV torch, jax or tf (got {v!r})")
        out[key] = val
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train-step", required=True, help="bench/train_step of a typeflow build")
    p.add_argument("--python", action="append", default=[], metavar="ENV=INTERPRETER")
    p.add_argument("--pythonpath", action="append", default=[], metavar="ENV=DIR")
    p.add_argument("--peers", default="", help="comma-separated peer keys (default: all)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=None, help="default: bench/run's")
    p.add_argument("--out", default=None, help="folder for race.json (the race's, with the CPU "
                   "and the date added) and race.log (a new temporary one by default)")
    args = p.parse_args()
    run = load_bench_run()
    pythons, paths = pairs(args.python, "python"), pairs(args.pythonpath, "pythonpath")
    train_step = pathlib.Path(args.train_step).resolve()
    if not train_step.is_file():
        sys.exit(f"race.py: no train_step at {train_step}")
    # run_race reads DEPS/venv-*/bin/python and BUILD/bench/train_step: stand-ins for both in
    # a private folder (never the caller's build), race.json and race.log copied to OUT.
    work = pathlib.Path(tempfile.mkdtemp(prefix="race-"))
    try:
        deps = work / "deps"
        for env in ("torch", "jax", "tf"):
            if env in pythons:
                given = pythons[env]
                python = shutil.which(given) or (os.path.abspath(given)
                                                 if os.path.isfile(given) else None)
                if not python:
                    sys.exit(f"race.py: --python {env}={given}: no such interpreter")
            else:
                python = str(run.DEPS / f"venv-{env}" / "bin" / "python")
                if not os.path.exists(python):
                    continue
            wrapper = deps / f"venv-{env}" / "bin" / "python"
            wrapper.parent.mkdir(parents=True)
            pre = ""
            if env in paths:
                pre = (f"PYTHONPATH={shlex.quote(os.path.abspath(paths[env]))}"
                       "${PYTHONPATH:+:$PYTHONPATH} ")
            wrapper.write_text(f"#!/bin/sh\n{pre}exec {shlex.quote(python)} \"$@\"\n")
            wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
        (work / "bench").mkdir()
        (work / "bench" / "train_step").symlink_to(train_step)
        run.DEPS = deps
        if args.peers:
            keep = args.peers.split(",")
            known = {key: venv for key, _, venv, *_ in run.PEERS}
            unknown = sorted(set(keep) - set(known))
            if unknown:
                sys.exit(f"race.py: unknown peers {unknown} (known: {', '.join(known)})")
            missing = [k for k in keep if not (deps / known[k] / "bin" / "python").exists()]
            if missing:
                sys.exit(f"race.py: no interpreter for {missing}: give --python ENV=INTERPRETER")
            run.PEERS = [peer for peer in run.PEERS if peer[0] in keep]
        if args.rounds:
            run.RACE_ROUNDS = args.rounds
        status = {}
        run.run_race(work, args.threads, False, status)
        for what, why in status.items():
            print(f"race.py: {what}: {why}", file=sys.stderr)
        out = pathlib.Path(args.out or tempfile.mkdtemp(prefix="race-out-"))
        out.mkdir(parents=True, exist_ok=True)
        race = {}
        if (work / "race.json").exists():
            race = json.loads((work / "race.json").read_text())
            race.update(cpu=cpu_name(run), threads=args.threads, train_step=str(train_step),
                        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
            (out / "race.json").write_text(json.dumps(race, indent=2) + "\n")
        if (work / "race.log").exists():
            shutil.copyfile(work / "race.log", out / "race.log")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines, verdict = run.race_markdown(race)
    print(f"The race on {args.threads} CPUs of {cpu_name(run)}, {race.get('rounds', 0)} rounds "
          f"of {race.get('steps', 0)} steps (raw figures: {out / 'race.json'})\n")
    print("\n".join(lines))
    return 2 if verdict is None else 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main())
