#!/usr/bin/env python3
"""Joins the raw results (FILE.json) of compare.py runs, e.g. the shards of the full protocol,
into one markdown report with the summary table last.

    python3 tools/bench/merge_results.py shard1.json shard2.json --out results.md
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import report  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="FILE.json files written by compare.py --out")
    parser.add_argument("--out", help="write the merged report here (and its .json next to it)")
    args = parser.parse_args(argv)
    if args.out is not None and Path(args.out).suffix == ".json":
        parser.error(f"--out: got {args.out!r}; accepted: a report file not ending in .json")
    return report.publish(report.merge([report.load(path) for path in args.results]), args.out)


if __name__ == "__main__":
    sys.exit(main())
