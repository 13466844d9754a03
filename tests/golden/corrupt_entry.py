"""Damages the one kernel cache entry of a directory.

    corrupt_entry.py flip DIR       inverts the byte in the middle of DIR/<key>.kernel
    corrupt_entry.py truncate DIR   cuts DIR/<key>.kernel to half its size

Fails unless DIR holds exactly one `*.kernel` file.
"""

import glob
import os
import sys


def main(argv):
    if len(argv) != 2 or argv[0] not in ("flip", "truncate"):
        sys.exit("corrupt_entry: usage: corrupt_entry.py flip|truncate DIR")
    action, directory = argv
    entries = glob.glob(os.path.join(directory, "*.kernel"))
    if len(entries) != 1:
        sys.exit(f"corrupt_entry: expected one *.kernel file in {directory}, found {len(entries)}")
    path = entries[0]
    size = os.path.getsize(path)
    if action == "truncate":
        os.truncate(path, size // 2)
        return 0
    with open(path, "r+b") as entry:
        entry.seek(size // 2)
        byte = entry.read(1)[0]
        entry.seek(size // 2)
        entry.write(bytes([byte ^ 0xFF]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
