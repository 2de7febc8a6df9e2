#!/usr/bin/env python3
"""The slowest tests of a `meson test` run, from its log (BUILD/meson-logs/testlog.json, one JSON object a test),
so that every run of tools/test.sh puts the suite's time on record:

  slowest 10 of 86 tests (the run: 1412 s of test time):
    612.3 s  plan_prediction
    ...

usage: tools/test_times.py BUILD_DIR [--top N]
"""
import argparse
import json
import pathlib
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--top", type=int, default=10)
    a = ap.parse_args()
    log = pathlib.Path(a.build) / "meson-logs" / "testlog.json"
    if not log.exists():
        sys.exit(f"{log}: no test log (meson test has not run in {a.build})")
    tests = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    tests.sort(key=lambda t: -t["duration"])
    total = sum(t["duration"] for t in tests)
    print(f"slowest {min(a.top, len(tests))} of {len(tests)} tests ({total:.0f} s of test time in all):")
    for t in tests[:a.top]:
        print(f"  {t['duration']:7.1f} s  {t['name']}  {t['result']}")


if __name__ == "__main__":
    main()
