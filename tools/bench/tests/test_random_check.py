"""Tests of random_check.py without a GPU: argument checks, the draw (repeatable by seed, specs
the compiler accepts, lengths and heads in range), and the verdicts, through a stand-in attnc.

Run: python3 -m unittest discover -s tools/bench/tests
"""

import contextlib
import io
import json
import os
import random
import stat
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
REPO = BENCH.parents[1]
ATTNC = REPO / "build" / "tools" / "attnc"
sys.path.insert(0, str(BENCH))

import random_check  # noqa: E402
from support import refusal  # noqa: E402


def option(arguments, name):
    return arguments[arguments.index(name) + 1]


def check_body(passed, max_abs_err, rel_l2_err, lse_max_err):
    """A stand-in attnc body printing run --check's JSON verdict, exiting 1 when not passed."""
    check = dict(passed=passed, max_abs_err=max_abs_err, rel_l2_err=rel_l2_err,
                 lse_max_err=lse_max_err, nonfinite=0)
    return f"echo '{json.dumps(dict(check=check))}'" + ("" if passed else "; exit 1")


def fake_attnc(directory, body):
    """An executable stand-in for attnc whose run prints `body` (a shell snippet)."""
    path = Path(directory) / "attnc"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


class ArgumentTest(unittest.TestCase):
    def refused(self, argv):
        return refusal(random_check.parse_args, argv)

    def test_bad_values_name_the_option(self):
        with tempfile.TemporaryDirectory() as scratch:
            attnc = fake_attnc(scratch, "exit 0")
            self.assertIn("--cases: got 0", self.refused(["--attnc", attnc, "--cases", "0"]))
            self.assertIn("--max-seqlen: got 1",
                          self.refused(["--attnc", attnc, "--max-seqlen", "1"]))
        self.assertIn("is not an executable attnc",
                      self.refused(["--attnc", "/nonexistent/attnc"]))

    def test_a_seed_is_drawn_when_none_is_given(self):
        with tempfile.TemporaryDirectory() as scratch:
            args = random_check.parse_args(["--attnc", fake_attnc(scratch, "exit 0")])
        self.assertGreater(args.seed, 0)


class DrawTest(unittest.TestCase):
    def draws(self, seed, count=200, max_seqlen=6000, target="sm_90a"):
        rng = random.Random(seed)
        return [random_check.draw_case(rng, target, max_seqlen) for _ in range(count)]

    def test_the_same_seed_draws_the_same_cases(self):
        self.assertEqual(self.draws(7), self.draws(7))
        self.assertNotEqual(self.draws(7), self.draws(8))

    def test_cases_are_in_range(self):
        families = set()
        for family, arguments in self.draws(3, max_seqlen=500):
            families.add(family.split()[0])
            for name in ("--seqlen-q", "--seqlen-k"):
                self.assertTrue(1 <= int(option(arguments, name)) <= 500, arguments)
            heads, kv_heads = int(option(arguments, "--heads")), int(option(arguments, "--kv-heads"))
            self.assertEqual(heads % kv_heads, 0, arguments)
            self.assertIn("target=sm_90a", option(arguments, "--spec"))
            self.assertIn("--check", arguments)
            if "--mask-heads" in arguments:
                self.assertIn(int(option(arguments, "--mask-heads")), (1, kv_heads))
            if "--window-left" in arguments:
                sides = int(option(arguments, "--window-left")), int(option(arguments,
                                                                            "--window-right"))
                self.assertNotEqual(sides, (-1, -1), arguments)
        self.assertEqual(families, {"none", "causal", "sliding_window", "flashmask"})

    def test_no_target_leaves_the_device_choice(self):
        for _, arguments in self.draws(5, count=20, target="none"):
            self.assertNotIn("target=", option(arguments, "--spec"))

    @unittest.skipUnless(os.access(ATTNC, os.X_OK), "build/tools/attnc is not built")
    def test_the_compiler_accepts_every_drawn_spec(self):
        specs = sorted({option(arguments, "--spec") for _, arguments in self.draws(11)})
        self.assertGreater(len(specs), 20)
        for spec in specs:
            run = subprocess.run([str(ATTNC), "emit", "--stage", "ir", "--spec", spec],
                                 capture_output=True, text=True)
            self.assertEqual(run.returncode, 0, f"{spec}: {run.stderr}")


class VerdictTest(unittest.TestCase):
    def run_main(self, body, cases=3):
        with tempfile.TemporaryDirectory() as scratch:
            attnc = fake_attnc(scratch, body)
            out = Path(scratch) / "table.md"
            stdout = io.StringIO()
            with contextlib.redirect_stdout(stdout):
                status = random_check.main(["--attnc", attnc, "--cases", str(cases), "--seed",
                                            "4", "--out", str(out)])
            return status, stdout.getvalue(), out.read_text()

    def test_all_passing(self):
        status, printed, table = self.run_main(check_body(True, 1e-3, 2e-3, 1e-6))
        self.assertEqual(status, 0)
        self.assertIn("| all | 3 | 3 |", table)
        self.assertIn("--seed 4", printed)

    def test_a_failed_check_fails_the_run(self):
        status, printed, table = self.run_main(check_body(False, 0.5, 0.1, 1))
        self.assertEqual(status, 1)
        self.assertIn("| all | 3 | 0 |", table)
        self.assertEqual(printed.count("failed: "), 3)

    def test_output_that_is_not_json_fails_the_run(self):
        status, printed, _ = self.run_main("echo '{not json'", cases=1)
        self.assertEqual(status, 1)
        self.assertIn("output is not JSON", printed)

    def test_a_crash_fails_the_run_with_its_message(self):
        status, printed, _ = self.run_main("echo 'attnc: launch failed' >&2; exit 3", cases=1)
        self.assertEqual(status, 1)
        self.assertIn("exit 3: attnc: launch failed", printed)


if __name__ == "__main__":
    unittest.main()
