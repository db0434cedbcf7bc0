#!/usr/bin/env python3
"""Checks the include directions of include/typeflow against scripts/layers.txt.

Every `#include "..."` (and `#include <typeflow/...>`) in a header under the root is resolved to
the file it names; both files are mapped to their layer (the longest layer name of the table that
is the file's path or one of its directories) and the include must stay inside one layer, go to a
layer the table allows, or be listed as a named exception. Exceptions record today's violations:
one that no longer matches a forbidden include is stale and fails too, so the list only shrinks.
A `forbid LAYER: WORD...` line names identifiers that the code of that layer (comments aside)
must not use: `forbid runtime: is_cpu` keeps the executor from asking which device it runs on.

Usage: python3 scripts/check_layers.py [--root DIR] [--table FILE]
  --root   the headers' directory (default: include/typeflow next to this script)
  --table  the layer table (default: scripts/layers.txt)
Exit status: 0 if every include is allowed, 1 on a violation, a stale exception or a file with no
layer, 2 on a malformed table.
"""

import argparse
import os
import posixpath
import re
import sys

HEADER_SUFFIXES = (".hpp", ".h", ".cuh", ".cu", ".ipp", ".inl")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*(?:"([^"]+)"|<(typeflow/[^>]+)>)')


class TableError(Exception):
    pass


def parse_table(path):
    """Returns (layers, exceptions, forbidden): layers maps name -> (allowed list or None for
    any, note); exceptions maps (from, to) -> (line number, note); forbidden maps a layer name
    -> [(word, note)]."""
    layers, exceptions, forbidden = {}, {}, {}
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            text, _, note = raw.partition("#")
            text, note = text.strip(), note.strip()
            if not text:
                continue
            where = f"{path}:{number}"
            if text.startswith("layer "):
                name, colon, deps = text[len("layer "):].partition(":")
                name = name.strip().strip("/")
                if not colon or not name:
                    raise TableError(f"{where}: expected 'layer NAME: LAYER...', got '{text}'")
                if name in layers:
                    raise TableError(f"{where}: layer {name} is listed twice")
                deps = deps.split()
                allowed = None if deps == ["*"] else [d.strip("/") for d in deps]
                layers[name] = (allowed, note)
            elif text.startswith("forbid "):
                name, colon, words = text[len("forbid "):].partition(":")
                name = name.strip().strip("/")
                if not colon or not name or not words.split():
                    raise TableError(f"{where}: expected 'forbid LAYER: WORD...', got '{text}'")
                for word in words.split():
                    if not re.fullmatch(r"[A-Za-z_][A-Za-z_0-9]*", word):
                        raise TableError(f"{where}: forbid takes identifiers, got '{word}'")
                    forbidden.setdefault(name, []).append((word, note))
            elif text.startswith("exception "):
                source, arrow, target = text[len("exception "):].partition("->")
                source, target = source.strip(), target.strip()
                if not arrow or not source or not target or " " in source or " " in target:
                    raise TableError(f"{where}: expected 'exception FILE -> FILE  # why', got '{text}'")
                if not note:
                    raise TableError(f"{where}: exception {source} -> {target} needs a '# why'")
                if (source, target) in exceptions:
                    raise TableError(f"{where}: exception {source} -> {target} is listed twice")
                exceptions[(source, target)] = (number, note)
            else:
                raise TableError(f"{where}: a line is 'layer ...', 'exception ...', 'forbid ...' "
                                 "or a comment")
    for name, (allowed, _) in layers.items():
        for dep in allowed or ():
            if dep not in layers:
                raise TableError(f"{path}: layer {name} allows {dep}, which is no layer")
    for name in forbidden:
        if name not in layers:
            raise TableError(f"{path}: forbid names {name}, which is no layer")
    return layers, exceptions, forbidden


def layer_of(rel, layers):
    """The longest layer name that is rel itself or one of its directories, or None."""
    best = None
    for name in layers:
        if rel == name or rel.startswith(name + "/"):
            if best is None or len(name) > len(best):
                best = name
    return best


def resolve(root, including_rel, quoted, angled):
    """The included file's path relative to root, or None when it names no file under root."""
    root_name = posixpath.basename(root.rstrip("/"))  # "typeflow"
    name = quoted if quoted is not None else angled
    candidates = []  # as the preprocessor looks: next to the including file, then -I include
    if quoted is not None:
        candidates.append(posixpath.normpath(posixpath.join(posixpath.dirname(including_rel),
                                                            quoted)))
    if name.startswith(root_name + "/"):
        candidates.append(posixpath.normpath(name[len(root_name) + 1:]))
    inside = [c for c in candidates if c != ".." and not c.startswith("../")]
    for c in inside:
        if os.path.isfile(os.path.join(root, c)):
            return c
    return inside[-1] if inside else None  # a file not written yet: its path still names a layer


def within(layer, outer):
    """Whether `layer` is `outer` or a layer inside it (backend/common/value.hpp inside
    backend/common): whoever may include a layer may include the layers it holds."""
    return layer == outer or layer.startswith(outer + "/")


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.join(here, "..", "include", "typeflow"))
    parser.add_argument("--table", default=os.path.join(here, "layers.txt"))
    args = parser.parse_args(argv)
    root = os.path.relpath(args.root)  # printed relative to the working directory
    table = os.path.relpath(args.table)
    try:
        layers, exceptions, forbidden = parse_table(table)
    except (TableError, OSError) as e:
        print(f"check_layers: {e}", file=sys.stderr)
        return 2
    if not os.path.isdir(root):
        print(f"check_layers: no directory {root}", file=sys.stderr)
        return 2

    problems = []
    used = set()  # exceptions that excused a forbidden include
    files = 0
    for directory, subdirs, names in os.walk(root):
        subdirs.sort()
        for fname in sorted(names):
            if not fname.endswith(HEADER_SUFFIXES):
                continue
            path = os.path.join(directory, fname)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            shown = os.path.relpath(path)
            files += 1
            source_layer = layer_of(rel, layers)
            if source_layer is None:
                problems.append(f"{shown}: no layer in {table} holds {rel}: add one")
                continue
            allowed, note = layers[source_layer]
            words = [(re.compile(rf"\b{w}\b"), w, why)
                     for name, ws in forbidden.items() if within(source_layer, name)
                     for w, why in ws]
            with open(path, encoding="utf-8", errors="replace") as f:
                for number, line in enumerate(f, 1):
                    code = line.split("//", 1)[0]
                    for word_re, word, why in words:
                        if word_re.search(code):
                            problems.append(f"{shown}:{number}: uses {word}, which "
                                            f"{source_layer} may not" + (f" ({why})" if why else ""))
                    m = INCLUDE_RE.match(line)
                    if not m:
                        continue
                    target = resolve(root, rel, m.group(1), m.group(2))
                    if target is None:
                        continue  # outside the library (a third-party header in quotes)
                    target_layer = layer_of(target, layers)
                    if target_layer is None:
                        problems.append(f"{shown}:{number}: includes {target}, which no layer "
                                        f"in {table} holds")
                        continue
                    if within(target_layer, source_layer) or allowed is None or any(
                            within(target_layer, a) for a in allowed):
                        continue
                    if (rel, target) in exceptions:
                        used.add((rel, target))
                        continue
                    may = "only " + " ".join(allowed) if allowed else "no other layer"
                    why = f" ({note})" if note else ""
                    problems.append(f"{shown}:{number}: {source_layer} -> {target_layer} "
                                    f"(#include of {target}) breaks the rule: {source_layer} "
                                    f"may include {may}{why}")
    for (source, target), (number, note) in sorted(exceptions.items(), key=lambda e: e[1][0]):
        if (source, target) not in used:
            problems.append(f"{table}:{number}: stale exception {source} -> {target}: no "
                            f"forbidden include matches it any more; delete the line ({note})")

    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"check_layers: {len(problems)} problem(s) in {files} files under {root}",
              file=sys.stderr)
        return 1
    print(f"check_layers: {files} files under {root} follow {table} "
          f"({len(exceptions)} recorded exceptions)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
