"""Puts a kernel cache directory into hostile states for the golden tests.

    hostile_cache.py fifo DIR                 replaces DIR's one <key>.kernel by a FIFO
    hostile_cache.py sparse DIR SIZE          ... by a sparse file of SIZE bytes (e.g. 50G)
    hostile_cache.py link-lock DIR TARGET     removes the entry and its lock file, and makes
                                              <key>.lock a symbolic link to TARGET
    hostile_cache.py hold-lock DIR -- CMD...  runs CMD while this process holds the flock of
                                              <key>.lock; prints "holder PID" first; exits
                                              with CMD's status

Fails unless DIR holds exactly one `*.kernel` entry (its key names the other files).
"""

import fcntl
import glob
import os
import subprocess
import sys


def the_entry(directory):
    entries = glob.glob(os.path.join(directory, "*.kernel"))
    if len(entries) != 1:
        sys.exit(f"hostile_cache: expected one *.kernel file in {directory}, "
                 f"found {len(entries)}")
    return entries[0]


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    action, directory = argv[0], argv[1]
    entry = the_entry(directory)
    lock = entry[: -len(".kernel")] + ".lock"
    if action == "fifo":
        os.remove(entry)
        os.mkfifo(entry)
    elif action == "sparse" and len(argv) == 3:
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        size = argv[2]
        count = int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
        with open(entry, "r+b") as handle:
            handle.truncate(0)
            handle.truncate(count)
    elif action == "link-lock" and len(argv) == 3:
        os.remove(entry)
        if os.path.lexists(lock):
            os.remove(lock)
        os.symlink(argv[2], lock)
    elif action == "hold-lock" and len(argv) > 3 and argv[2] == "--":
        with open(lock, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            print(f"holder {os.getpid()}", flush=True)
            return subprocess.run(argv[3:]).returncode
    else:
        sys.exit(__doc__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
