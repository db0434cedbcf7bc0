#!/usr/bin/env python3
"""Validates a Chrome trace-event JSON file as typeflow writes it (io/trace.hpp).

The trace-event format ("JSON Object Format" of Google's Trace Event Format document, which
Perfetto and chrome://tracing read): a top-level object whose "traceEvents" is a list of events.
Checked here, for every event:
  - an object with a string "name" and a "ph" (phase) among the phases typeflow writes:
    "X" (complete event) and "M" (metadata);
  - "pid" and "tid" integers;
  - "X": "ts" and "dur" finite numbers, ts >= 0, dur >= 0, "cat" a string, "args" an object
    (when present) whose "bytes" is a non-negative integer and "flops" a non-negative number;
  - "M": "name" one of process_name, process_sort_index, thread_name, thread_sort_index, with
    "args" holding "name" (a string) or "sort_index" (an integer);
and across events: every (pid, tid) of an "X" event has a thread_name, every pid a process_name,
and "displayTimeUnit", when present, is "ms" or "ns".

Usage: check_trace.py FILE [--runs N] [--min-steps N]
  --runs N       exactly N events of category "run"
  --min-steps N  at least N events of category "step"
Exit status: 0 valid, 1 invalid (each problem printed, the first 20), 2 unreadable or not JSON.
"""

import argparse
import json
import math
import sys

METADATA = {"process_name": "name", "thread_name": "name", "process_sort_index": "sort_index",
            "thread_sort_index": "sort_index"}


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v):
    return (is_int(v) or isinstance(v, float)) and math.isfinite(v)


def check(doc, runs=None, min_steps=None):
    """Returns the list of problems of a parsed trace (empty when valid)."""
    problems = []
    if not isinstance(doc, dict):
        return ["the top level is not an object"]
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        return ['"traceEvents" is missing or not a list']
    unit = doc.get("displayTimeUnit", "ms")
    if unit not in ("ms", "ns"):
        problems.append(f'displayTimeUnit is "{unit}", not "ms" or "ns"')
    processes, threads, used = set(), set(), set()
    categories = {}
    for i, e in enumerate(events):
        where = f"event {i}"
        if not isinstance(e, dict):
            problems.append(f"{where}: not an object")
            continue
        name, ph = e.get("name"), e.get("ph")
        if not isinstance(name, str) or not name:
            problems.append(f"{where}: no name")
        if ph not in ("X", "M"):
            problems.append(f"{where}: phase {ph!r} (typeflow writes X and M)")
            continue
        if not is_int(e.get("pid")) or not is_int(e.get("tid")):
            problems.append(f"{where} ({name}): pid and tid must be integers")
            continue
        key = (e["pid"], e["tid"])
        args = e.get("args", {})
        if not isinstance(args, dict):
            problems.append(f"{where} ({name}): args is not an object")
            continue
        if ph == "M":
            field = METADATA.get(name)
            if field is None:
                problems.append(f"{where}: unknown metadata event {name!r}")
                continue
            value = args.get(field)
            if field == "name" and not isinstance(value, str):
                problems.append(f"{where}: {name} without a string args.name")
            if field == "sort_index" and not is_int(value):
                problems.append(f"{where}: {name} without an integer args.sort_index")
            if name == "process_name":
                processes.add(e["pid"])
            if name == "thread_name":
                threads.add(key)
            continue
        ts, dur, cat = e.get("ts"), e.get("dur"), e.get("cat")
        if not is_number(ts) or ts < 0:
            problems.append(f"{where} ({name}): ts {ts!r} is not a non-negative number")
        if not is_number(dur) or dur < 0:
            problems.append(f"{where} ({name}): dur {dur!r} is not a non-negative number")
        if not isinstance(cat, str):
            problems.append(f"{where} ({name}): no category")
        else:
            categories[cat] = categories.get(cat, 0) + 1
        if "bytes" in args and (not is_int(args["bytes"]) or args["bytes"] < 0):
            problems.append(f"{where} ({name}): args.bytes {args['bytes']!r}")
        if "flops" in args and (not is_number(args["flops"]) or args["flops"] < 0):
            problems.append(f"{where} ({name}): args.flops {args['flops']!r}")
        used.add(key)
    for pid, tid in sorted(used):
        if pid not in processes:
            problems.append(f"process {pid} has events but no process_name")
        if (pid, tid) not in threads:
            problems.append(f"track ({pid}, {tid}) has events but no thread_name")
    if runs is not None and categories.get("run", 0) != runs:
        problems.append(f"{categories.get('run', 0)} run events, expected {runs}")
    if min_steps is not None and categories.get("step", 0) < min_steps:
        problems.append(f"{categories.get('step', 0)} step events, expected at least {min_steps}")
    return problems


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--runs", type=int)
    parser.add_argument("--min-steps", type=int)
    a = parser.parse_args(argv)
    try:
        with open(a.file, encoding="utf-8") as f:
            doc = json.load(f, parse_constant=lambda c: float("nan"))
    except (OSError, ValueError) as err:
        print(f"check_trace: {a.file}: {err}", file=sys.stderr)
        return 2
    problems = check(doc, a.runs, a.min_steps)
    for p in problems[:20]:
        print(f"check_trace: {a.file}: {p}", file=sys.stderr)
    if problems:
        return 1
    events = doc["traceEvents"]
    print(f"check_trace: {a.file}: valid, {len(events)} events")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
