"""Starts several copies of one command at once and prints their output lines sorted.

    run_concurrently.py COPIES -- COMMAND [ARG...]

Every copy is started before any is waited for. Fails unless every copy exits 0. Sorting
makes the combined output independent of which copy finished first, so FileCheck can
count outcomes (e.g. exactly one cache miss and one disk hit). Stderr is forwarded.
"""

import subprocess
import sys


def main(argv):
    if len(argv) < 3 or argv[1] != "--":
        sys.exit("run_concurrently: usage: run_concurrently.py COPIES -- COMMAND [ARG...]")
    copies = int(argv[0])
    command = argv[2:]
    processes = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(copies)
    ]
    lines = []
    failed = False
    for index, process in enumerate(processes):
        stdout, stderr = process.communicate()
        sys.stderr.buffer.write(stderr)
        lines.extend(stdout.decode().splitlines())
        if process.returncode != 0:
            print(f"run_concurrently: copy {index} exited with {process.returncode}",
                  file=sys.stderr)
            failed = True
    sys.stderr.flush()
    for line in sorted(lines):
        print(line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
