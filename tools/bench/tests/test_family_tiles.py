"""Tests of family_tiles.py's parts that need neither PyTorch nor a GPU: argument checks, the
protocol's problem sizes, the index masks' pair counts and the report.

Run: python3 -m unittest discover -s tools/bench/tests
"""

import sys
import unittest
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

import family_tiles  # noqa: E402
from support import refusal  # noqa: E402


def refused(argv):
    return refusal(family_tiles.parse_args, argv)


class ArgumentTest(unittest.TestCase):
    def test_defaults(self):
        args = family_tiles.parse_args([])
        self.assertEqual(len(args.families), 13)
        self.assertEqual(args.families[-1], "causal_as_flashmask")
        self.assertEqual(args.tiles, [])
        self.assertEqual(family_tiles.problem(args), (16, 32))

    def test_lists_and_sizes(self):
        args = family_tiles.parse_args(["--head-dim", "64", "--seqlen", "32768", "--families",
                                        "causal,document", "--tiles",
                                        "128x128x12:warpgroups,64x128x8:warpgroups"])
        self.assertEqual(args.families, ["causal", "document"])
        self.assertEqual(args.tiles, ["128x128x12:warpgroups", "64x128x8:warpgroups"])
        self.assertEqual(family_tiles.problem(args), (4, 64))

    def test_bad_values_are_refused(self):
        self.assertIn("--families: got 'docs'; accepted: full, causal",
                      refused(["--families", "causal,docs"]))
        self.assertIn("--seqlen: got 1000; accepted: a divisor of 131072",
                      refused(["--seqlen", "1000"]))
        self.assertIn("--head-dim: got 100; accepted: a divisor of 4096",
                      refused(["--head-dim", "100"]))
        self.assertIn("accepted: >= 1 / >= 0", refused(["--runs", "0"]))
        self.assertIn("--tiles: got 128x96x12:warpgroups with --mode fwd+bwd; accepted: none",
                      refused(["--mode", "fwd+bwd", "--tiles", "128x96x12:warpgroups"]))
        self.assertIn("invalid choice: 'bwd'", refused(["--mode", "bwd"]))


class MaskTest(unittest.TestCase):
    def test_index_masks_count_their_pairs(self):
        args = family_tiles.parse_args(["--seqlen", "8192"])
        self.assertEqual(family_tiles.mask_arguments(None, None, "full", args, None),
                         ("none", False, None, 16 * 32 * 8192 * 8192))
        self.assertEqual(family_tiles.mask_arguments(None, None, "causal", args, None),
                         ("causal", False, None, 16 * 32 * 8192 * 8193 // 2))


class ReportTest(unittest.TestCase):
    def test_rows_against_the_automatic_choice(self):
        args = family_tiles.parse_args(["--tiles", "128x112x12:warpgroups"])
        rows = [dict(family="document", tiles="auto", visible=0.331, ms=12.0, tflops=500.0),
                dict(family="document", tiles="128x112x12:warpgroups", visible=0.331, ms=13.2,
                     tflops=454.5)]
        text = family_tiles.report(args, "GPU", rows)
        self.assertIn("## attnjit forward by tile shape: GPU", text)
        self.assertIn("| document (33.1%) | auto | 12.000 | 500 | 1.000 |", text)
        self.assertIn("| document (33.1%) | 128x112x12:warpgroups | 13.200 | 454 | 1.100 |", text)
        self.assertIn("S=8192, B=16, H=32, D=128", text)

    def test_forward_backward_report(self):
        args = family_tiles.parse_args(["--mode", "fwd+bwd", "--head-dim", "64"])
        self.assertEqual(args.mode, "fwd+bwd")
        rows = [dict(family="document", tiles="auto", visible=0.331, ms=40.0, tflops=300.0)]
        text = family_tiles.report(args, "GPU", rows)
        self.assertIn("## attnjit forward+backward: GPU", text)
        self.assertIn("3.5*4*B*H*D*visible pairs", text)
        self.assertIn("| document (33.1%) | auto | 40.000 | 300 | 1.000 |", text)


if __name__ == "__main__":
    unittest.main()
