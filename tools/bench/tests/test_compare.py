"""Tests of compare.py's parts that need neither PyTorch nor a GPU: argument checks, the
synthetic parameters and mask_mods of every family against attnjit's host builders (through
the C ABI), the visible-pair counts, the spec texts, and the report and its merging.

Run: python3 -m unittest discover -s tools/bench/tests (ATTNJIT_LIBRARY may name the library).
"""

import contextlib
import io
import itertools
import json
import sys
import tempfile
import unittest
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "python"))

import attnjit  # noqa: E402
import compare  # noqa: E402
import families  # noqa: E402
import merge_results  # noqa: E402
import report  # noqa: E402
from support import refusal  # noqa: E402


def parse_error(argv):
    """The message argparse prints for bad arguments."""
    return refusal(compare.parse_args, argv)


def nested(mask):
    indices = mask.startend_row_indices
    return indices.tolist() if hasattr(indices, "tolist") else indices


class Arguments(unittest.TestCase):
    def test_defaults_quick_and_shards(self):
        args = compare.parse_args([])
        self.assertEqual(args.seqlens, [8192, 32768])
        self.assertEqual(args.head_dims, [64, 128, 256])
        self.assertEqual(list(args.families), list(families.FAMILIES))
        self.assertEqual(args.modes, ["fwd", "fwd+bwd"])
        quick = compare.parse_args(["--quick"])
        self.assertEqual((quick.seqlens, quick.head_dims), ([8192], [128]))
        self.assertEqual((quick.runs, quick.warmup), (compare.QUICK["runs"],
                                                      compare.QUICK["warmup"]))
        self.assertEqual(len(quick.families), 12)
        shard = compare.parse_args(["--families", "document,causal", "--seqlens", "32768",
                                    "--head-dims", "256,64", "--modes", "fwd+bwd", "--runs",
                                    "7", "--latency", "none", "--out", "shard.md"])
        self.assertEqual(shard.families, ["causal", "document"])
        self.assertEqual(shard.seqlens, [32768])
        self.assertEqual(shard.head_dims, [64, 256])
        self.assertEqual(shard.modes, ["fwd+bwd"])
        self.assertEqual((shard.runs, shard.warmup), (7, compare.FULL["warmup"]))

    def test_bad_arguments_name_the_option(self):
        cases = [
            (["--families", "causal,diagonal"], "--families: got 'causal,diagonal'; accepted"),
            (["--seqlens", "1000"], "--seqlens: got '1000'"),
            (["--seqlens", "8k"], "--seqlens: got '8k'"),
            (["--head-dims", "96"], "--head-dims: got '96'; accepted: a comma-separated list "
                                    "of 64, 128, 256"),
            (["--modes", "bwd"], "--modes: got 'bwd'"),
            (["--runs", "0"], "--runs: got 0; accepted: an int >= 1"),
            (["--warmup", "-1"], "--warmup: got -1"),
            (["--tokens", "0"], "--tokens: got 0"),
            (["--latency", "diagonal"], "--latency: got 'diagonal'"),
            (["--out", "results.json"], "--out: got 'results.json'"),
        ]
        for argv, message in cases:
            with self.subTest(argv=argv):
                self.assertIn(message, parse_error(argv))


class Families(unittest.TestCase):
    """Each family's mask_mod, evaluated on lists, equals attnjit's vectors element by element,
    for the synthetic parameters compare.py draws (on small sizes)."""

    SEQLEN = 40
    BATCH = 2
    HEADS = 2

    def check_family(self, family, seed):
        n, batch = self.SEQLEN, self.BATCH
        mask_heads = families.mask_heads_of(family, self.HEADS)
        params = families.parameters(family, n, batch, mask_heads, seed)
        mask = attnjit.flashmask(family, n, batch=batch, heads=mask_heads, **params)
        tables = {name: families.Table(rows)
                  for name, rows in families.tables(family, params, n, batch).items()}
        mask_mod = families.mask_mod(family, params, tables)
        values = nested(mask)
        visible = 0
        for b, h, q, k in itertools.product(range(batch), range(mask_heads), range(n), range(n)):
            expected = True if mask_mod is None else bool(mask_mod(b, h, q, k))
            if mask.kind == "flashmask":
                got = families.vector_visible(mask.causal, mask.columns, values[b][h][k], q, k)
            else:
                got = mask.kind == "none" or k <= q
            if got != expected:
                self.fail(f"{family} seed {seed}: sample {b} head {h} query {q} key {k}: "
                          f"vectors say visible={got}, the mask_mod {expected}")
            visible += got
        # Each mask head serves HEADS / mask_heads query heads.
        self.assertEqual(mask.visible_pairs(self.HEADS), visible * self.HEADS // mask_heads)
        return visible

    def test_mask_mods_match_the_builders(self):
        for family in families.FAMILIES:
            for seed in range(3):
                with self.subTest(family=family, seed=seed):
                    visible = self.check_family(family, seed)
                    self.assertGreater(visible, 0)

    def test_every_row_sees_a_key(self):
        # SDPA's dense mask gives NaN for a row without keys; the protocol's masks have none.
        n = self.SEQLEN
        for family in families.FAMILIES[2:]:
            params = families.parameters(family, n, 1, 1, 5)
            tables = {name: families.Table(rows)
                      for name, rows in families.tables(family, params, n, 1).items()}
            mask_mod = families.mask_mod(family, params, tables)
            for q in range(n):
                self.assertTrue(any(mask_mod(0, 0, q, k) for k in range(n)), (family, q))

    def test_parameters_follow_the_protocol(self):
        for seqlen, (low, high) in ((8192, (3, 7)), (32768, (10, 14))):
            params = families.parameters("causal_document", seqlen, 4, 1, 0)
            for lengths in params["doc_lengths"]:
                self.assertEqual(sum(lengths), seqlen)
                self.assertTrue(low <= len(lengths) <= high)
                self.assertTrue(all(length >= 1 for length in lengths))
        self.assertEqual(families.parameters("sliding_window", 8192, 16, 1, 0),
                         {"window": 512})
        self.assertEqual(families.parameters("global_sliding_window", 8192, 16, 1, 0),
                         {"global_tokens": 16, "left": 512, "right": 512})
        self.assertEqual(families.parameters("prefix_lm_causal", 8192, 16, 1, 0),
                         {"prefix": 4096})
        shared = families.parameters("share_question", 8192, 2, 1, 0)["documents"]
        for sample in shared:
            self.assertEqual(sum(sum(document) for document in sample), 8192)
            self.assertTrue(all(3 <= len(document) <= 7 for document in sample))
        first = families.parameters("document", 8192, 4, 1, 0)
        self.assertEqual(first, families.parameters("document", 8192, 4, 1, 0))
        self.assertNotEqual(first, families.parameters("document", 8192, 4, 1, 1))
        self.assertEqual(families.mask_heads_of("random_eviction", 32), 32)
        self.assertEqual(families.mask_heads_of("document", 32), 1)

    def test_spec_texts_are_those_attention_compiles(self):
        class Tensor:
            def __init__(self, *shape):
                self.shape = shape
                self.dtype = "torch.bfloat16"

        q = Tensor(2, 64, 4, 128)
        for family, params in (("causal", {}), ("document", {"doc_lengths": [64]}),
                               ("qk_sparse", {"offset": 2, "length": 4})):
            mask = attnjit.flashmask(family, 64, **params)
            indices = None if mask.kind != "flashmask" else Tensor(1, 1, 64, mask.columns)
            forward = attnjit._spec_text(q, q, mask.kind, mask.causal, indices, True, None, None)
            backward = (f"{attnjit._spec_text(q, q, mask.kind, mask.causal, indices, False, None, None)} "
                        "direction=backward deterministic=false")
            self.assertEqual(families.attnjit_spec(mask.mask_text, 128, "forward"), forward)
            self.assertEqual(families.attnjit_spec(mask.mask_text, 128, "backward"), backward)


def timing(family, mode, impl, ms, note="", seqlen=8192, head_dim=128):
    return dict(seqlen=seqlen, batch=16, heads=32, head_dim=head_dim, family=family, mode=mode,
                impl=impl, ms=ms, min_ms=None if ms is None else ms * 0.9,
                max_ms=None if ms is None else ms * 1.1,
                tflops=None if ms is None else 100.0 / ms, visible=0.25, note=note)


def sample_result(command, seqlen=8192):
    meta = dict(device="NVIDIA H100", driver="580, CUDA 13.0", torch="2.11", attnjit="0.1.0",
                date="2026-11-22 10:00", commands=[command], protocol="bf16.")
    result = report.empty(meta)
    result["timings"] = [
        timing("document", "fwd+bwd", "attnjit", 2.0, seqlen=seqlen),
        timing("document", "fwd+bwd", "SDPA dense mask", 8.0, seqlen=seqlen),
        timing("document", "fwd+bwd", "FlexAttention", 1.0, seqlen=seqlen),
        timing("random_eviction", "fwd", "attnjit", 4.0, seqlen=seqlen),
        timing("random_eviction", "fwd", "SDPA dense mask", None,
               "skipped: the dense mask needs 96 GiB", seqlen=seqlen),
        timing("random_eviction", "fwd", "FlexAttention", None, "failed: OOM", seqlen=seqlen),
    ]
    result["checks"] = [
        dict(seqlen=seqlen, batch=16, heads=32, head_dim=128, family="document",
             mode="fwd+bwd", reference="FlexAttention",
             errors={"o": 1e-3, "dq": 3e-3, "dk": 2e-3, "dv": 1e-3}, status="ok"),
        dict(seqlen=seqlen, batch=16, heads=32, head_dim=128, family="random_eviction",
             mode="fwd", reference="FlexAttention", errors={"o": 0.5}, status="WRONG"),
    ]
    result["failures"] = ["random_eviction fwd: relative errors"]
    return result


class Report(unittest.TestCase):
    def test_summary_rows_and_speedups(self):
        lines = report.summary(sample_result("python3 compare.py")).splitlines()
        self.assertEqual(len(lines), 4)
        self.assertTrue(lines[0].startswith("| S | D | family | mode | attnjit TFLOP/s"))
        # Protocol order: document before random eviction.
        self.assertEqual(lines[2], "| 8192 | 128 | document | fwd+bwd | 50 | - | - | 4.00x | "
                                   "0.50x | ok |")
        self.assertEqual(lines[3], "| 8192 | 128 | random eviction | fwd | 25 | - | - | "
                                   "skipped | - | WRONG |")

    def test_render_puts_the_summary_last_and_marks_wrong_rows(self):
        text = report.render(sample_result("python3 compare.py --quick"))
        self.assertIn("Device: NVIDIA H100, driver 580, CUDA 13.0, torch 2.11", text)
        self.assertIn("    python3 compare.py --quick", text)
        self.assertIn("### S=8192, B=16, H=32, D=128", text)
        self.assertIn("| document (25.0%) | fwd+bwd | attnjit | 2.000 (1.800-2.200) | 50 |  | "
                      "3.0e-03 (dq) vs FlexAttention |", text)
        self.assertIn("| random eviction (25.0%) | fwd | attnjit | 4.000 (3.600-4.400) | 25 |  "
                      "| WRONG: 5.0e-01 (o) vs FlexAttention |", text)
        self.assertIn("| skipped: the dense mask needs 96 GiB |", text)
        self.assertIn("**FAILED:**", text)
        self.assertTrue(text.rstrip().endswith(report.summary(
            sample_result("x")).rstrip().splitlines()[-1]))

    def test_merge_joins_shards(self):
        with tempfile.TemporaryDirectory() as directory:
            paths = []
            for index, seqlen in enumerate((8192, 32768)):
                path = Path(directory) / f"shard{index}.json"
                report.save(sample_result(f"shard {index}", seqlen), path)
                paths.append(str(path))
            out = Path(directory) / "merged.md"
            stdout = io.StringIO()
            with contextlib.redirect_stdout(stdout):
                status = merge_results.main(paths + ["--out", str(out)])
            self.assertEqual(status, 1)  # the shards carry a failure
            text = out.read_text()
            self.assertEqual(stdout.getvalue(), text)
            self.assertIn("    shard 0\n    shard 1", text)
            self.assertIn("### S=32768", text)
            merged = json.loads(out.with_suffix(".json").read_text())
            self.assertEqual(len(merged["timings"]), 12)
            self.assertEqual(len(merged["failures"]), 2)
            self.assertEqual(len(report.summary(merged).splitlines()), 6)


if __name__ == "__main__":
    unittest.main()
