"""Tests of varlen_vs_peers.py's parts that need neither PyTorch nor a GPU: argument checks,
the document lengths (repeatable by seed, summing to the row) and the pair count.

Run: python3 -m unittest discover -s tools/bench/tests
"""

import random
import sys
import unittest
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

import varlen_vs_peers  # noqa: E402
from support import refusal  # noqa: E402


class ArgumentTest(unittest.TestCase):
    def refused(self, argv):
        return refusal(varlen_vs_peers.parse_args, argv)

    def test_defaults(self):
        args = varlen_vs_peers.parse_args([])
        self.assertEqual((args.total, args.means, args.heads, args.kv_heads, args.head_dim),
                         (65536, [1024, 4096, 8192], 16, 16, 128))

    def test_bad_values_name_the_option_and_what_is_accepted(self):
        self.assertIn("--means: got 'a,b'; accepted: comma-separated integers",
                      self.refused(["--means", "a,b"]))
        self.assertIn("--means: got 70000; accepted: 1 to --total (65536)",
                      self.refused(["--means", "70000"]))
        self.assertIn("--kv-heads: got 3; accepted: a divisor of --heads (16)",
                      self.refused(["--kv-heads", "3"]))
        self.assertIn("--head-dim: got 80", self.refused(["--head-dim", "80"]))
        self.assertIn("--runs: got 0; accepted: an integer >= 1", self.refused(["--runs", "0"]))


class LengthTest(unittest.TestCase):
    def test_lengths_fill_the_row_with_documents_of_at_least_one_token(self):
        for seed, mean, total in ((0, 1024, 65536), (1, 4096, 65536), (2, 7, 100), (3, 50, 50)):
            lengths = varlen_vs_peers.draw_lengths(random.Random(seed), mean, total)
            self.assertEqual(sum(lengths), total)
            self.assertGreaterEqual(min(lengths), 1)

    def test_the_mean_is_near_the_asked_one(self):
        lengths = varlen_vs_peers.draw_lengths(random.Random(5), 1000, 2_000_000)
        self.assertAlmostEqual(sum(lengths) / len(lengths), 1000, delta=60)

    def test_the_same_seed_draws_the_same_lengths(self):
        draw = varlen_vs_peers.draw_lengths
        self.assertEqual(draw(random.Random(9), 512, 10000), draw(random.Random(9), 512, 10000))
        self.assertNotEqual(draw(random.Random(9), 512, 10000),
                            draw(random.Random(10), 512, 10000))

    def test_offsets_and_pairs(self):
        self.assertEqual(varlen_vs_peers.offsets([4, 3, 3]), [0, 4, 7, 10])
        # Causal inside documents of 4, 3 and 3 tokens: 10 + 6 + 6 pairs.
        self.assertEqual(varlen_vs_peers.visible_pairs([4, 3, 3]), 22)


if __name__ == "__main__":
    unittest.main()
