#!/usr/bin/env python3
"""The documentation's two size and place rules (issue 44), as CTest's docs.hygiene runs them:

- README.md has at most 300 lines: what typeflow is, the set-up commands, the quick start, the
  model in one page and links; the guides live in docs/.
- Dated figures live in bench/README.md only, each with its machine: no file outside bench/
  and docs/ (code, comments, scripts, CMake) names a date, and no line of README.md or docs/
  names a date beside a measured figure (seconds, bytes, a ratio, a percentage, a rate).

Usage: check_docs.py [ROOT]      (default: the repository this script is in)
       check_docs.py --selftest  (each rule catches what it should, on a scratch tree)
"""
import pathlib
import re
import subprocess
import sys
import tempfile

README_MAX_LINES = 300
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
FIGURE = re.compile(
    r"\d(?:[\d.,]*\d)?\s*(?:s|ms|us|µs|ns|GB|GiB|MB|MiB|KB|KiB|x|×|%|GB/s|GFLOP/s|"
    r"examples/sec|images/s)(?![\w])")
SKIP_DIRS = ("bench/", "docs/")


def tracked_files(root: pathlib.Path) -> list[str]:
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], check=True, capture_output=True).stdout
        return [f for f in out.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for p in root.rglob("*"):
            rel = p.relative_to(root).as_posix()
            if p.is_file() and not rel.startswith((".", "build")):
                files.append(rel)
        return files


def check(root: pathlib.Path) -> list[str]:
    problems = []
    readme = root / "README.md"
    n = len(readme.read_text(encoding="utf-8").splitlines())
    if n > README_MAX_LINES:
        problems.append(f"README.md: {n} lines, more than {README_MAX_LINES} "
                        "(move the detail to a page in docs/)")
    for rel in sorted(tracked_files(root)):
        path = root / rel
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary data (fixtures, checkpoints)
        prose = rel == "README.md" or (rel.startswith("docs/") and rel.endswith(".md"))
        if rel.startswith(SKIP_DIRS) and not prose:
            continue
        for i, line in enumerate(text.splitlines(), 1):
            if not DATE.search(line):
                continue
            if prose and not FIGURE.search(line):
                continue  # a date without a figure (a section's name, a piece of history)
            what = "a dated figure" if prose else "a date"
            problems.append(f"{rel}:{i}: {what} outside bench/ (move it to bench/README.md): "
                            f"{line.strip()[:120]}")
    return problems


def selftest() -> int:
    with tempfile.TemporaryDirectory() as d:
        root = pathlib.Path(d)
        day = "-".join(("2026", "11", "26"))  # (not spelled whole: this file is checked too)
        (root / "docs").mkdir()
        (root / "bench").mkdir()
        (root / "include").mkdir()
        (root / "README.md").write_text("line\n" * (README_MAX_LINES + 1))
        (root / "docs" / "guide.md").write_text(
            f"See *README figures moved {day}*.\n"      # a section's name: allowed
            f"It took 38.4 s on an AMD Zen 4 ({day}).\n")  # a dated figure: caught
        (root / "bench" / "README.md").write_text(f"38.4 s (AMD Zen 4, {day})\n")  # allowed
        (root / "include" / "x.hpp").write_text(f"// measured {day}\n")  # caught
        got = check(root)
        want = ["README.md: 301 lines", "docs/guide.md:2:", "include/x.hpp:1:"]
        ok = len(got) == len(want) and all(g.startswith(w) for g, w in zip(got, want))
        (root / "README.md").write_text("line\n" * README_MAX_LINES)
        (root / "docs" / "guide.md").write_text(f"See *README figures moved {day}*.\n")
        (root / "include" / "x.hpp").write_text("// measured on an AMD Zen 4\n")
        clean = check(root)
    if not ok or clean:
        print("check_docs.py --selftest FAILED:\n  caught: " + "\n  caught: ".join(got) +
              "\n  on the clean tree: " + "; ".join(clean))
        return 1
    print("check_docs.py --selftest: the README's length, a dated figure in docs/ and a date in "
          "code are caught; a section's name and bench/ are not")
    return 0


def main() -> int:
    if sys.argv[1:] == ["--selftest"]:
        return selftest()
    root = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent
    problems = check(root.resolve())
    for p in problems:
        print(p)
    if problems:
        return 1
    print("check_docs.py: README.md within 300 lines; no dated figure outside bench/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
