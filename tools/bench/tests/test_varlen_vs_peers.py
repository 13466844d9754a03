"""varlen_vs_peers.py without PyTorch or a GPU: its argument checks, the document lengths it
draws (repeatable by seed, filling the row) and their offsets, and for --families the
parameters of each sequence (attnjit's builders take them, and their vectors hide what the
family's mask_mod hides) and the packed row's mask_mod (each sequence's vectors, in its local
positions, and nothing across sequences). Part of ctest bench_scripts."""

import random
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import varlen_vs_peers  # noqa: E402
from support import refusal  # noqa: E402

import attnjit  # noqa: E402  (varlen_vs_peers put the package on sys.path)
import families  # noqa: E402


def refused(argv):
    """The message varlen_vs_peers refuses `argv` with."""
    return refusal(varlen_vs_peers.parse_args, argv)


class ArgumentTest(unittest.TestCase):
    def test_defaults(self):
        args = varlen_vs_peers.parse_args([])
        self.assertEqual((args.total, args.means, args.heads, args.kv_heads, args.head_dim,
                          args.families), (65536, [1024, 4096, 8192], 16, 16, 128, []))

    def test_families(self):
        names = "share_question,prefix_lm_document,global_sliding_window,causal_blockwise"
        self.assertEqual(varlen_vs_peers.parse_args(["--families", names]).families,
                         names.split(","))

    def test_bad_values_name_the_option_and_what_is_accepted(self):
        for argv, message in (
                (["--means", "a,b"], "--means: got 'a,b'; accepted: comma-separated integers"),
                (["--means", "70000"], "--means: got 70000; accepted: 1 to --total (65536)"),
                (["--kv-heads", "3"], "--kv-heads: got 3; accepted: a divisor of --heads (16)"),
                (["--head-dim", "80"], "--head-dim: got 80; accepted: 32, 64, 96, 128"),
                (["--runs", "0"], "--runs: got 0; accepted: an integer >= 1"),
                (["--families", "share_question,qk_sparse"],
                 "--families: got 'qk_sparse'; accepted: comma-separated names of "
                 "share_question, prefix_lm_document, global_sliding_window, causal_blockwise")):
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


def vectors_of(family, n):
    """attnjit.flashmask's vectors of one sequence of n tokens, [n][C] local values, and the
    mask."""
    mask = attnjit.flashmask(family, seqlen=n, **varlen_vs_peers.sequence_parameters(family, n))
    values = mask.startend_row_indices
    values = values.tolist() if hasattr(values, "tolist") else values
    return values[0][0], mask


class FamilyInsideTest(unittest.TestCase):
    def test_near_equal(self):
        self.assertEqual(varlen_vs_peers.near_equal(10, 4), [3, 3, 2, 2])
        self.assertEqual(varlen_vs_peers.near_equal(2, 4), [1, 1])
        self.assertEqual(varlen_vs_peers.near_equal(0, 3), [])

    def test_the_vectors_hide_what_the_rule_hides(self):
        scalars = {"global_tokens": varlen_vs_peers.GLOBAL_TOKENS,
                   "left": varlen_vs_peers.WINDOW, "right": varlen_vs_peers.WINDOW}
        for family in varlen_vs_peers.VARLEN_FAMILIES:
            lengths = (1, 2, 3, 4, 5, 17, 70) + ((700,) if family == "global_sliding_window"
                                                   else ())
            for n in lengths:
                with self.subTest(family=family, n=n):
                    values, mask = vectors_of(family, n)
                    params = varlen_vs_peers.sequence_parameters(family, n)
                    tables = {name: families.Table(rows) for name, rows in
                              families.tables(family, params, n, 1).items()}
                    rule = families.mask_mod(family, scalars, tables)
                    for q in range(n):
                        for k in range(n):
                            self.assertEqual(
                                families.vector_visible(mask.causal, mask.columns, values[k], q,
                                                        k), bool(rule(0, 0, q, k)), (q, k))

    def test_the_packed_rule_is_each_sequence_s_in_local_positions(self):
        lengths = [5, 1, 17, 3, 9]
        cuts = varlen_vs_peers.offsets(lengths)
        sequence_of = [s for s, n in enumerate(lengths) for _ in range(n)]
        for family in varlen_vs_peers.VARLEN_FAMILIES:
            with self.subTest(family=family):
                packed, masks = [], []
                for n in lengths:
                    values, mask = vectors_of(family, n)
                    packed += values
                    masks.append(mask)
                tables, sequence, local = varlen_vs_peers.packed_tables(family, lengths)
                self.assertEqual((sequence, local[:7]), (sequence_of, [0, 1, 2, 3, 4, 0, 0]))
                mask_mod = varlen_vs_peers.packed_mask_mod(
                    family, {name: families.Table(rows) for name, rows in tables.items()},
                    families.Table(sequence), families.Table(local))
                total = cuts[-1]
                for q in range(total):
                    for k in range(total):
                        s = sequence_of[q]
                        expected = s == sequence_of[k] and families.vector_visible(
                            masks[s].causal, masks[s].columns, packed[k], q - cuts[s],
                            k - cuts[s])
                        self.assertEqual(bool(mask_mod(0, 0, q, k)), expected, (q, k))


if __name__ == "__main__":
    unittest.main()
