"""Tests of deterministic_cost.py's parts that need neither PyTorch nor a GPU: argument checks
and the report (costs, the repeatability verdict).

Run: python3 -m unittest discover -s tools/bench/tests
"""

import sys
import unittest
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

import deterministic_cost  # noqa: E402
from support import refusal  # noqa: E402


def row(family, atomic_ms, deterministic_ms, differing=0):
    return dict(head_dim=128, family=family, atomic_ms=atomic_ms,
                deterministic_ms=deterministic_ms, deterministic_differing=differing,
                atomic_differing=3, error=1.5e-5)


class ArgumentTest(unittest.TestCase):
    def test_defaults_cover_every_family(self):
        args = deterministic_cost.parse_args([])
        self.assertEqual(args.head_dims, [128])
        self.assertEqual(len(args.families), 12)

    def test_lists(self):
        args = deterministic_cost.parse_args(["--head-dims", "64,128", "--families",
                                              "causal,document"])
        self.assertEqual(args.head_dims, [64, 128])
        self.assertEqual(args.families, ["causal", "document"])

    def test_unknown_family_is_refused(self):
        self.assertIn("--families: got 'docs'; accepted: full, causal",
                      refusal(deterministic_cost.parse_args, ["--families", "causal,docs"]))


class ReportTest(unittest.TestCase):
    def test_costs_and_verdicts(self):
        args = deterministic_cost.parse_args(["--repeats", "3"])
        text = deterministic_cost.report(args, "GPU", [row("full", 100.0, 106.0),
                                                       row("causal", 50.0, 75.0, differing=1)])
        lines = text.splitlines()
        full = next(line for line in lines if line.startswith("| 128 | full |"))
        causal = next(line for line in lines if line.startswith("| 128 | causal |"))
        self.assertIn("| 100.00 | 106.00 | 1.06x | 0/3 | 3/3 | 1.5e-05 |", full)
        self.assertIn("| 1.50x | 1/3 NOT REPEATABLE |", causal)
        self.assertNotIn("NOT REPEATABLE", full)
        self.assertIn("- device: GPU", text)


if __name__ == "__main__":
    unittest.main()
