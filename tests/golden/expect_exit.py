"""Runs a command and fails unless it exits with exactly the expected status.

    expect_exit.py STATUS [--stdout-lines N] [--stderr-lines N] -- COMMAND [ARG...]

lit's `not` accepts any non-zero status, a crash included; attnc promises 2 for bad input
and 1 for device and compile failures, with one line on stderr. The command's stdout and
then its stderr are forwarded unchanged, so the output can still be piped to FileCheck.
Exits 0 when the status and the line counts match, 1 otherwise (saying why on stderr).
"""

import argparse
import signal
import subprocess
import sys


def count_lines(data):
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def describe(status):
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"killed by {name}"
    return f"exit status {status}"


def main(argv):
    if "--" not in argv:
        sys.exit("expect_exit: usage: expect_exit.py STATUS [--stdout-lines N] "
                 "[--stderr-lines N] -- COMMAND [ARG...]")
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="expect_exit.py")
    parser.add_argument("status", type=int)
    parser.add_argument("--stdout-lines", type=int)
    parser.add_argument("--stderr-lines", type=int)
    options = parser.parse_args(argv[:split])
    command = argv[split + 1:]
    if not command:
        sys.exit("expect_exit: no command after --")

    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sys.stdout.buffer.write(result.stdout)
    sys.stdout.flush()
    sys.stderr.buffer.write(result.stderr)
    sys.stderr.flush()

    problems = []
    if result.returncode != options.status:
        problems.append(f"expected exit status {options.status}, got {describe(result.returncode)}")
    for stream, expected, data in (("stdout", options.stdout_lines, result.stdout),
                                   ("stderr", options.stderr_lines, result.stderr)):
        if expected is not None and count_lines(data) != expected:
            problems.append(f"expected {expected} line(s) on {stream}, got {count_lines(data)}")
    for problem in problems:
        print(f"expect_exit: {problem}: {' '.join(command)}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
