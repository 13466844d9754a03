"""compare.py's whole flow -- arguments, masks from the real host builders, the check, timings,
memory, latency, the report and its JSON -- with PyTorch, the GPU measurements and the peers
replaced by stand-ins that return fixed numbers. It catches mistakes in the orchestration that
would otherwise first show on the GPU machine.

Run: python3 -m unittest discover -s tools/bench/tests (ATTNJIT_LIBRARY may name the library).
"""

import contextlib
import importlib.machinery
import io
import json
import sys
import tempfile
import types
import unittest
from pathlib import Path
from unittest import mock

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "python"))

import compare  # noqa: E402
import families  # noqa: E402


class FakeTensor:
    """Just enough of a tensor for compare.py and attnjit.FlashMask."""

    def __init__(self, shape=(1,)):
        self.shape = tuple(shape)
        self.device = "cuda:0"
        self.grad = None

    def requires_grad_(self):
        return self

    def clone(self):
        return self

    def reshape(self, shape):
        return FakeTensor(shape)

    def to(self, _device):
        return self

    def numel(self):
        count = 1
        for size in self.shape:
            count *= size
        return count

    def element_size(self):
        return 4


def fake_torch():
    torch = types.ModuleType("torch")
    torch.__spec__ = importlib.machinery.ModuleSpec("torch", None)
    torch.__version__ = "0.0-stand-in"
    torch.Tensor = FakeTensor
    torch.int32 = "int32"
    torch.bfloat16 = "bfloat16"
    torch.version = types.SimpleNamespace(cuda="0.0")
    torch.manual_seed = lambda seed: None
    torch.frombuffer = lambda buffer, dtype: FakeTensor((len(buffer),))
    torch.randn = lambda shape, **kwargs: FakeTensor(shape)

    class Generator:
        def __init__(self, device):
            self.device = device

        def manual_seed(self, seed):
            return self

    torch.Generator = Generator
    torch.cuda = types.SimpleNamespace(
        is_available=lambda: True, get_device_name=lambda: "Stand-in GPU",
        mem_get_info=lambda: (80 << 30, 80 << 30), empty_cache=lambda: None)
    torch._dynamo = types.SimpleNamespace(
        reset=lambda: None, config=types.SimpleNamespace(cache_size_limit=8))
    return torch


def fake_peers(calls):
    peers = types.ModuleType("peers")

    class Implementation:
        def __init__(self, name):
            self.name = name

    def timed(function, repeats):
        calls.append(("timed", repeats))
        return 2.0, 1.0, function()

    peers.Implementation = Implementation
    peers.timed = timed
    peers.device_build = lambda *args: (None, "")
    peers.device_tables = lambda tables, device: tables
    peers.block_mask_builder = lambda *args: ((lambda: FakeTensor()), "create_block_mask")
    peers.dense_mask_bytes = lambda family, batch, mask_heads, seqlen: (
        (1 << 40) if family == "random_eviction" else 3 * batch * seqlen * seqlen)
    peers.dense_mask = lambda *args: FakeTensor((2, 1, 128, 128))
    peers.attnjit_implementation = lambda mask: Implementation("attnjit")
    peers.sdpa_implementations = lambda causal: [Implementation("SDPA flash"),
                                                 Implementation("SDPA cuDNN")]
    peers.dense_implementation = lambda visible: Implementation("SDPA dense mask")
    peers.flex_implementation = lambda block_mask: Implementation("FlexAttention")
    return peers


def fake_measure(wrong_family):
    measure = types.ModuleType("measure")
    measure.GRADIENTS = ("dq", "dk", "dv")

    def results(implementation, q, k, v, d_o, backward):
        keys = ["o"] + (list(measure.GRADIENTS) if backward else [])
        return {key: (implementation.name, key) for key in keys}

    def relative_error(got, reference):
        return 0.5 if current["family"] == wrong_family else 1e-3

    current = {"family": None}
    measure.current = current
    measure.results = results
    measure.relative_error = relative_error
    measure.time_step = lambda implementation, *args: {
        "attnjit": (2.0, 1.9, 2.2), "SDPA flash": (3.0, 2.9, 3.1)}.get(
            implementation.name, (4.0, 3.9, 4.1))
    measure.step_peak_mib = lambda *args: 100.0
    measure.attnjit_latency = lambda *args: [dict(impl="attnjit", what="cold", ms=500.0,
                                                  note="")]
    measure.flex_latency = lambda *args: [dict(impl="FlexAttention", what="first", ms=9000.0,
                                               note="")]
    return measure


class Flow(unittest.TestCase):
    def run_compare(self, argv, wrong_family=None):
        calls = []
        measure = fake_measure(wrong_family)
        modules = {"torch": fake_torch(), "peers": fake_peers(calls), "measure": measure}
        original_family = compare.Run.family

        def family(run, config, name, inputs, d_o):
            measure.current["family"] = name
            return original_family(run, config, name, inputs, d_o)

        stdout, stderr = io.StringIO(), io.StringIO()
        with mock.patch.dict(sys.modules, modules), \
                mock.patch.object(compare.Run, "family", family), \
                contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            status = compare.main(argv)
        return status, stdout.getvalue(), stderr.getvalue(), calls

    def test_a_run_of_every_family_reports_every_row(self):
        with tempfile.TemporaryDirectory() as directory:
            out = Path(directory) / "report.md"
            status, stdout, stderr, calls = self.run_compare(
                ["--tokens", "256", "--seqlens", "128", "--head-dims", "64", "--runs", "3",
                 "--out", str(out)])
            self.assertEqual(status, 0, stderr)
            self.assertEqual(out.read_text(), stdout)
            result = json.loads(out.with_suffix(".json").read_text())
        cases = len(families.FAMILIES) * 2
        self.assertEqual(len(result["checks"]), cases)
        self.assertTrue(all(check["status"] == "ok" for check in result["checks"]))
        # attnjit, flash, cuDNN, Flex for full and causal; attnjit, dense, Flex for the others.
        self.assertEqual(len(result["timings"]), 2 * (2 * 4 + 10 * 3))
        self.assertEqual(len(result["memory"]), 2 * 4 + 10 * 3)
        self.assertEqual(result["failures"], [])
        self.assertEqual([row["impl"] for row in result["latency"]], ["attnjit", "FlexAttention"])
        eviction = [row for row in result["timings"] if row["family"] == "random_eviction"
                    and row["impl"] == "SDPA dense mask"]
        self.assertTrue(all(row["ms"] is None and row["note"].startswith("skipped: the dense")
                            for row in eviction))
        full = next(row for row in result["timings"] if row["family"] == "full"
                    and row["impl"] == "attnjit" and row["mode"] == "fwd")
        self.assertEqual(full["visible"], 1.0)
        self.assertAlmostEqual(full["tflops"], 4 * 64 * (2 * 64 * 128 * 128) / 2e-3 / 1e12)
        check = next(c for c in result["checks"] if c["family"] == "document"
                     and c["mode"] == "fwd+bwd")
        self.assertEqual(check["reference"], "FlexAttention")
        self.assertEqual(sorted(check["errors"]), ["dk", "dq", "dv", "o"])
        self.assertIn("| 128 | 64 | random eviction | fwd+bwd | ", stdout.splitlines()[-1])
        self.assertIn("skipped", stdout.splitlines()[-1])
        self.assertIn("S=128 B=2 H=64 D=64 share_question", stderr)
        self.assertTrue(("timed", 3) in calls)

    def test_a_wrong_result_fails_the_run(self):
        status, stdout, stderr, _ = self.run_compare(
            ["--tokens", "256", "--seqlens", "128", "--head-dims", "128", "--families",
             "document,qk_sparse", "--modes", "fwd", "--latency", "none"], "qk_sparse")
        self.assertEqual(status, 1)
        self.assertIn("FAILED: S=128 D=128 qk_sparse fwd: relative errors", stderr)
        self.assertIn("| 128 | 128 | QK-sparse | fwd | ", stdout)
        self.assertTrue(stdout.rstrip().endswith("| WRONG |"))
        self.assertNotIn("## First-call latency", stdout)
        self.assertNotIn("## Peak GPU memory", stdout)


if __name__ == "__main__":
    unittest.main()
