#!/usr/bin/env python3
"""The suite's time budget cannot erode silently (suites lint and quick): every test() call in tests/**/meson.build
names its suite and its timeout, and a test allowed more than 120 s says why in a `# slow:` comment (in the comment
block directly above its test() call, or among its arguments; a timeout computed from a table is judged by the
table's own comments). Then, from the build's own list of tests (meson-info/intro-tests.json), every test is in one
of the suites tests/README.md names, and the quick tier holds at least 40 tests, each allowed 120 s at most.

usage: check_test_table.py SOURCE_ROOT BUILD_ROOT
"""
import json
import pathlib
import re
import sys

SUITES = {"unit", "io", "pack", "tokenize", "python", "mpi", "torch", "ckpt", "e2e", "slurm", "lint", "offline",
          "launch", "contract", "fuzz", "cuda", "quick"}
SLOW = 120     # seconds: a test allowed longer says why
QUICK = 120    # seconds: the most a quick-tier test may be allowed
QUICK_COUNT = 40


def calls(text):
    """(line number, argument text) of every test(...) call."""
    for m in re.finditer(r"(?<![\w.])test\(", text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        yield text.count("\n", 0, m.start()) + 1, text[m.end():i - 1]


def comment_above(lines, line_no):
    """The comment block directly above line line_no (1-based; a foreach line between them is passed over)."""
    block, i = [], line_no - 2
    while i >= 0 and (lines[i].strip().startswith("#") or lines[i].strip().startswith("foreach")):
        block.append(lines[i])
        i -= 1
    return "\n".join(block)


def timeout_of(args):
    m = re.search(r"timeout:\s*([^,)]+)", args)
    if not m:
        return None
    value = m.group(1).strip()
    return int(value) if value.isdigit() else value   # an expression (t[2], fuzz_seconds + 120)


def check_sources(root):
    problems = []
    for path in sorted((root / "tests").rglob("meson.build")):
        text = path.read_text()
        lines = text.splitlines()
        for line_no, args in calls(text):
            where = f"{path.relative_to(root)}:{line_no}"
            if "suite:" not in args:
                problems.append(f"{where}: a test without a suite (suite: [...]; tests/README.md lists them)")
            timeout = timeout_of(args)
            if timeout is None:
                problems.append(f"{where}: a test without a timeout (timeout: SECONDS, about 3x its time here)")
                continue
            said = "# slow:" in args or "# slow:" in comment_above(lines, line_no)
            if isinstance(timeout, int) and timeout > SLOW and not said:
                problems.append(f"{where}: timeout {timeout} s > {SLOW} s without a '# slow:' comment saying why")
    return problems


def check_build(build):
    tests = json.loads((build / "meson-info" / "intro-tests.json").read_text())
    problems = []
    quick = 0
    for t in tests:
        suites = {s.split(":", 1)[-1] for s in t["suite"]}
        if not suites & SUITES:
            problems.append(f"test {t['name']}: suites {sorted(suites)}, none of {sorted(SUITES)}")
        if "quick" in suites:
            quick += 1
            if t["timeout"] > QUICK:
                problems.append(f"test {t['name']}: in the quick tier, allowed {t['timeout']} s (at most {QUICK})")
    if quick < QUICK_COUNT:
        problems.append(f"the quick tier holds {quick} tests (at least {QUICK_COUNT})")
    return problems, len(tests), quick


def main():
    root, build = map(pathlib.Path, sys.argv[1:3])
    problems = check_sources(root)
    more, count, quick = check_build(build)
    problems += more
    for p in problems:
        print(p)
    if problems:
        sys.exit(f"{len(problems)} problem(s) in the test table")
    print(f"{count} tests, each with a suite and a timeout; {quick} in the quick tier")


if __name__ == "__main__":
    main()
