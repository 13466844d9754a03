"""varlen_vs_peers.py without PyTorch or a GPU: its argument checks, the document lengths it
draws (repeatable by seed, filling the row) and their offsets. Part of ctest bench_scripts."""

import random
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import varlen_vs_peers  # noqa: E402
from support import refusal  # noqa: E402


def refused(argv):
    """The message varlen_vs_peers refuses `argv` with."""
    return refusal(varlen_vs_peers.parse_args, argv)


class ArgumentTest(unittest.TestCase):
    def test_defaults(self):
        args = varlen_vs_peers.parse_args([])
        self.assertEqual((args.total, args.means, args.heads, args.kv_heads, args.head_dim),
                         (65536, [1024, 4096, 8192], 16, 16, 128))

    def test_bad_values_name_the_option_and_what_is_accepted(self):
        for argv, message in (
                (["--means", "a,b"], "--means: got 'a,b'; accepted: comma-separated integers"),
                (["--means", "70000"], "--means: got 70000; accepted: 1 to --total (65536)"),
                (["--kv-heads", "3"], "--kv-heads: got 3; accepted: a divisor of --heads (16)"),
                (["--head-dim", "80"], "--head-dim: got 80; accepted: 32, 64, 96, 128"),
                (["--runs", "0"], "--runs: got 0; accepted: an integer >= 1")):
            with self.subTest(argv=argv):
                self.assertIn(message, refused(argv))


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

    def test_offsets(self):
        self.assertEqual(varlen_vs_peers.offsets([4, 3, 3]), [0, 4, 7, 10])


if __name__ == "__main__":
    unittest.main()
