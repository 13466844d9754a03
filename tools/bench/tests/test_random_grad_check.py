"""Tests of random_grad_check.py's parts that need neither PyTorch nor a GPU: argument checks, the
draw (repeatable by seed, in range, every family and head dim), the mask heads and the verdict.

Run: python3 -m unittest discover -s tools/bench/tests
"""

import math
import random
import sys
import unittest
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

import families  # noqa: E402
import random_grad_check  # noqa: E402
from support import refusal  # noqa: E402


class ArgumentTest(unittest.TestCase):
    def refused(self, argv):
        return refusal(random_grad_check.parse_args, argv)

    def test_bad_values_name_the_option(self):
        self.assertIn("--cases: got 0", self.refused(["--cases", "0"]))
        self.assertIn("--max-seqlen: got 8", self.refused(["--max-seqlen", "8"]))

    def test_defaults_and_a_fresh_seed(self):
        args = random_grad_check.parse_args([])
        self.assertEqual((args.cases, args.max_seqlen), (30, 2048))
        self.assertGreater(args.seed, 0)


class DrawTest(unittest.TestCase):
    def draws(self, seed, count=300, max_seqlen=1000):
        rng = random.Random(seed)
        return [random_grad_check.draw_case(rng, max_seqlen) for _ in range(count)]

    def test_the_same_seed_draws_the_same_cases(self):
        self.assertEqual(self.draws(3), self.draws(3))
        self.assertNotEqual(self.draws(3), self.draws(4))

    def test_cases_are_in_range_and_cover_the_families(self):
        cases = self.draws(5)
        for case in cases:
            self.assertTrue(16 <= case["seqlen"] <= 1000, case)
            self.assertEqual(case["heads"] % case["kv_heads"], 0, case)
            self.assertIn(case["head_dim"], random_grad_check.HEAD_DIMS)
            self.assertIn(case["dtype"], random_grad_check.DTYPES)
        self.assertEqual({c["family"] for c in cases}, set(families.FAMILIES))
        self.assertEqual({c["head_dim"] for c in cases}, set(random_grad_check.HEAD_DIMS))
        self.assertTrue(any(c["deterministic"] for c in cases))
        self.assertTrue(any(c["softcap"] is not None for c in cases))
        self.assertTrue(any(c["alibi"] for c in cases))

    def test_describe_names_what_repeats_a_case(self):
        case = self.draws(6, count=1)[0]
        text = random_grad_check.describe(case)
        for key in ("family", "seqlen", "mask_seed", "data_seed"):
            self.assertIn(str(case[key]), text)

    def test_mask_heads(self):
        case = {"family": "random_eviction", "kv_heads": 4}
        self.assertEqual(random_grad_check.mask_heads(case), 4)
        self.assertEqual(random_grad_check.mask_heads(dict(case, family="document")), 1)


class VerdictTest(unittest.TestCase):
    def test_every_error_within_its_limit(self):
        verdict = random_grad_check.verdict
        self.assertTrue(verdict({"o": (1e-3, 2e-3, 5e-3), "dq": (0.0, 0.0, 0.0)}))
        self.assertFalse(verdict({"o": (1e-3, 2e-3, 5e-3), "dq": (3e-3, 2e-3, 5e-3)}))
        self.assertFalse(verdict({"o": (math.nan, 1.0, 0.0)}))
        # Within a loose max-error limit but off by 3% in l2: fails.
        self.assertFalse(verdict({"o": (0.1, 5.0, 0.03)}))
        self.assertFalse(verdict({"o": (0.1, 5.0, math.nan)}))


if __name__ == "__main__":
    unittest.main()
