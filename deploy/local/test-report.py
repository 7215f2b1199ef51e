#!/usr/bin/env python3
"""What deploy/local/test prints about a build and a test run.

  test-report.py build ARTIFACTS.json CARGO_STATUS
      Every compiler diagnostic of `cargo test --no-run --message-format=json`, as rendered, to
      stderr; exits non-zero when the build failed or left any warning.
  test-report.py tests JUNIT.xml[,JUNIT.xml...] DOC_LOG SECONDS
      From nextest's JUnit reports (missing ones are skipped when another exists) and the doc
      tests' output: the 15 slowest tests with their
      times, then the failures, then one closing line.
"""

import json
import os
import re
import sys
import xml.etree.ElementTree as ET

SLOWEST = 15


def build(artifacts, cargo_status):
    warnings = 0
    with open(artifacts) as lines:
        for line in lines:
            message = json.loads(line)
            if message.get("reason") != "compiler-message":
                continue
            m = message["message"]
            sys.stderr.write(m.get("rendered") or m["message"] + "\n")
            warnings += m["level"] == "warning"
    if cargo_status != "0":
        sys.exit(f"test build failed (cargo exited with {cargo_status}): the errors are above")
    if warnings:
        sys.exit(f"{warnings} warnings: the build must have none (rustc's and clippy's lints)")


def tests(junits, doc_log, seconds):
    cases = []
    reports = [j for j in junits.split(",") if os.path.exists(j)]
    for junit in reports:
        for suite in ET.parse(junit).getroot().iter("testsuite"):
            for case in suite.iter("testcase"):
                failed = case.find("failure") is not None or case.find("error") is not None
                cases.append((float(case.get("time") or 0), f"{suite.get('name')} {case.get('name')}", failed))
    if not reports:
        print(f"\nno JUnit report at {junits}: the test run did not start")
    if cases:
        print(f"\nslowest tests:")
        for took, name, _ in sorted(cases, reverse=True)[:SLOWEST]:
            print(f"  {took:7.1f}s  {name}")
    failures = sorted(name for _, name, failed in cases if failed)
    doc_passed = doc_failed = 0
    if os.path.exists(doc_log):
        with open(doc_log) as log:
            for line in log:
                if line.startswith("test result:"):
                    doc_passed += int(re.search(r"(\d+) passed", line).group(1))
                    doc_failed += int(re.search(r"(\d+) failed", line).group(1))
                elif line.endswith(" ... FAILED\n"):
                    failures.append(f"doc test {line.split(' ... ')[0].removeprefix('test ')}")
    if failures:
        print("\nfailed tests:")
        for name in failures:
            print(f"  {name}")
    passed = sum(1 for _, _, failed in cases if not failed) + doc_passed
    failed = sum(1 for _, _, failed in cases if failed) + doc_failed
    minutes, secs = divmod(int(seconds), 60)
    print(f"\ntests: {passed} passed, {failed} failed, in {minutes} min {secs} s")


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {"build": build, "tests": tests}[command](*args)
