"""Runs a command under an address-space limit and a time limit.

    limits.py --memory-mb MB --seconds S -- COMMAND [ARG...]

The command gets RLIMIT_AS of MB MiB beyond a small base (its own code and libraries need
some) and is killed after S seconds; exits with its status (124 on the time limit).
"""

import argparse
import resource
import subprocess
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--memory-mb", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    limit = args.memory_mb << 20

    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    try:
        return subprocess.run(command, preexec_fn=limit_memory, timeout=args.seconds).returncode
    except subprocess.TimeoutExpired:
        print(f"limits: {command[0]} ran past {args.seconds} s", file=sys.stderr)
        return 124


if __name__ == "__main__":
    sys.exit(main())
