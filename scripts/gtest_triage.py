#!/usr/bin/env python3
"""One line about a GoogleTest log, and which failed tests fail on their own.

  python3 scripts/gtest_triage.py LOG                       the counts and the first failure's message
  python3 scripts/gtest_triage.py LOG --rerun BIN [--budget S]
      also runs each failed test alone (BIN --gtest_filter=NAME, one process each, S seconds in all, default 60)

Why: on the GPU one illegal address leaves the CUDA context broken, and every later test in the same process
fails too (session 10, run 2: 55 of 55 failed after one bad kernel). The summary names the first failure and
its message; the reruns tell the tests that fail by themselves from those that only inherited a broken context.
scripts/device_check.sh prints this line instead of every test's name.
"""
import argparse
import re
import subprocess
import sys
import time

RESULT = re.compile(r"^\[\s+(OK|FAILED|SKIPPED)\s+\] (\S+?)(?:, where GetParam\(\) = .*?)? \(\d+ ms\)$")
FIRST_MESSAGE = re.compile(r"(C\+\+ exception with description \"[^\"]*\"|Failure|error: .*)")


def parse(text):
    """(passed, failed, skipped) test names in log order, each once, and the first failure's message."""
    status, first_msg, pending = {}, None, []
    for line in text.splitlines():
        m = RESULT.match(line.strip())
        if m:
            kind, name = m.groups()
            if name not in status:
                status[name] = kind
                if kind == "FAILED" and first_msg is None and pending:
                    first_msg = pending[-1]
            pending = []
            continue
        if line.startswith("[ RUN"):
            pending = []
        elif FIRST_MESSAGE.search(line):
            pending.append(line.strip())
    names = lambda k: [n for n, s in status.items() if s == k]  # noqa: E731
    return names("OK"), names("FAILED"), names("SKIPPED"), first_msg


def summary(passed, failed, skipped, first_msg):
    line = f"{len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped"
    if failed:
        line += f"; first failure: {failed[0]}"
        if first_msg:
            line += f" ({first_msg[:160]})"
    return line


def rerun(binary, failed, budget):
    """[(name, 'fails' | 'passes' | 'not run')] with each test alone, within budget seconds."""
    out, t_end = [], time.monotonic() + budget
    for name in failed:
        left = t_end - time.monotonic()
        if left <= 1:
            out.append((name, "not run"))
            continue
        try:
            r = subprocess.run([binary, f"--gtest_filter={name}"], capture_output=True, text=True, timeout=left)
            out.append((name, "passes" if r.returncode == 0 else "fails"))
        except subprocess.TimeoutExpired:
            out.append((name, "not run"))
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log")
    ap.add_argument("--rerun", metavar="BIN", help="run each failed test alone with this GoogleTest binary")
    ap.add_argument("--budget", type=float, default=60.0, help="seconds for all the reruns (default 60)")
    args = ap.parse_args(argv[1:])
    try:
        text = open(args.log, errors="replace").read()
    except OSError as e:
        print(f"gtest_triage: cannot read {args.log}: {e.strerror}", file=sys.stderr)
        return 2
    passed, failed, skipped, first_msg = parse(text)
    if not (passed or failed or skipped):
        print(f"gtest_triage: no test results in {args.log}")
        return 1
    line = summary(passed, failed, skipped, first_msg)
    if args.rerun and failed:
        alone = rerun(args.rerun, failed, args.budget)
        still = [n for n, s in alone if s == "fails"]
        not_run = sum(1 for _, s in alone if s == "not run")
        line += f"; alone, {len(still)} of {len(failed)} still fail"
        if still:
            line += ": " + ", ".join(still[:5]) + (" ..." if len(still) > 5 else "")
        if not_run:
            line += f" ({not_run} not rerun: out of time)"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
