"""Tests of compile_stages.py: argument checks, the emitted sources' split by kernel, the PTX's
products and their removal; with NVRTC present, a small kernel compiled to PTX through ctypes.

Run: python3 -m unittest discover -s tools/bench/tests
"""

import sys
import tempfile
import unittest
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

import compile_stages  # noqa: E402
from support import refusal  # noqa: E402

EMITTED = """// ===== kernel @attnjit_flashmask_minmax_c1_bn128 (flashmask_minmax) =====
#include "attnjit/masks/flashmask_minmax.cuh"
extern "C" __global__ void minmax() {}

// ===== kernel @attnjit_fwd_bf16_d128_causal (forward) =====
// spec: dtype=bf16
#include "attnjit/sm90a/forward.cuh"
extern "C" __global__ void forward() {}
"""

PTX = """\twgmma.fence.sync.aligned;
wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%f1}, %rd1, %rd2, p, 1, 1, 0, 0;
\tadd.s32 %r1, %r2, 16;
wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%f1}, %rd3, %rd4, 1, 1, 1, 0, 0;
\twgmma.commit_group.sync.aligned;
\tmul.f32 %f2, %f3, %f4;
wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%f5}, {%r1, %r2, %r3, %r4}, %rd5, 1, 1, 1, 1;
\twgmma.commit_group.sync.aligned;
\twgmma.wait_group.sync.aligned 0;
"""


class ArgumentTest(unittest.TestCase):
    def parse_error(self, argv):
        return refusal(compile_stages.parse_args, argv)

    def test_defaults(self):
        args = compile_stages.parse_args(["--spec", "dtype=bf16 head_dim=64 mask=none",
                                          "--attnc", sys.executable])
        self.assertEqual(args.role, "forward")
        self.assertEqual(args.arch, "sm_90a")
        self.assertEqual((args.rounds, args.repeats, args.products), (3, 3, False))
        self.assertEqual(args.templates, [str(compile_stages.REPO / "templates")])

    def test_bad_values_name_the_field(self):
        self.assertIn("--attnc: '/nonexistent/attnc' is not an executable",
                      self.parse_error(["--spec", "x", "--attnc", "/nonexistent/attnc"]))
        self.assertIn("--rounds: got 0", self.parse_error(["--spec", "x", "--rounds", "0"]))
        self.assertIn("--repeats: got -1", self.parse_error(["--spec", "x", "--repeats", "-1"]))
        self.assertIn("--arch: got 'compute_90a'",
                      self.parse_error(["--spec", "x", "--arch", "compute_90a"]))
        with tempfile.TemporaryDirectory() as empty:
            self.assertIn("has no attnjit/ directory",
                          self.parse_error(["--spec", "x", "--templates", empty,
                                            "--attnc", sys.executable]))


class SourceTest(unittest.TestCase):
    def test_split_kernels_keeps_each_kernel_with_its_role(self):
        kernels = compile_stages.split_kernels(EMITTED)
        self.assertEqual([(k[0], k[1]) for k in kernels],
                         [("attnjit_flashmask_minmax_c1_bn128", "flashmask_minmax"),
                          ("attnjit_fwd_bf16_d128_causal", "forward")])
        self.assertIn("void minmax()", kernels[0][2])
        self.assertNotIn("void forward()", kernels[0][2])
        self.assertTrue(kernels[1][2].startswith("// ===== kernel @attnjit_fwd_bf16_d128_causal"))
        self.assertIn("void forward()", kernels[1][2])

    def test_products_are_the_wgmma_between_commits(self):
        groups = compile_stages.product_groups(PTX)
        self.assertEqual(groups, [[1, 3], [6]])
        stripped = compile_stages.without_lines(PTX, groups[0])
        self.assertNotIn("%rd1, %rd2", stripped)
        self.assertNotIn("%rd3, %rd4", stripped)
        self.assertIn("%rd5", stripped)
        self.assertIn("add.s32 %r1", stripped)
        self.assertEqual(compile_stages.product_groups(stripped), [[4]])


class NvrtcTest(unittest.TestCase):
    def test_a_small_kernel_compiles_to_ptx(self):
        try:
            nvrtc = compile_stages.Nvrtc()
        except SystemExit as missing:
            self.skipTest(str(missing))
        milliseconds, ptx = nvrtc.compile(
            'extern "C" __global__ void scale(float* x) { x[threadIdx.x] *= 2.0f; }',
            ["--gpu-architecture=compute_90a", "-std=c++17"])
        self.assertGreater(milliseconds, 0.0)
        self.assertIn(".entry scale", ptx)
        with self.assertRaises(RuntimeError) as failed:
            nvrtc.compile("this is not CUDA", ["--gpu-architecture=compute_90a"])
        self.assertIn("NVRTC", str(failed.exception))


if __name__ == "__main__":
    unittest.main()
