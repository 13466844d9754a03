"""attnjit under torch.compile and CUDA graphs, through the torch.ops.attnjit custom operators.

For every mask kind (none, causal, sliding window, FlashMask vectors as inputs, a FlashMask
object, predicate masks with their tensors as inputs, score modifiers): torch.compile(f) and
torch.compile(f, fullgraph=True) give eager's outputs and gradients, torch._dynamo.explain
counts no graph break; dynamic=True with new sequence lengths and new mask data compiles no
attnjit kernel (the library's cache counters); torch.cuda.graph capture and replay of the
forward and of forward+backward give eager's results; explicit cuda:0 (and cuda:1 where there
is one); bad inputs (CPU tensor, mixed devices, a shape mismatch seen through fake tensors)
raise one AttnjitError naming the argument.

Skipped unless PyTorch 2.4+ (torch.library.custom_op) and a CUDA device are available.
Run: python3 tools/python/tests/run_tests.py --gpu (ATTNJIT_LIBRARY may name the library).
"""

import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attnjit  # noqa: E402

from torch_cuda import HAS_CUDA, torch  # noqa: E402

HAS_OPS = HAS_CUDA and attnjit._ops is not None
BATCH, HEADS, KV_HEADS, HEAD_DIM = 2, 4, 2, 64


def document_bounds(seqlen, shift, device):
    """(start, end) [seqlen] of the document holding each position: three documents whose
    boundaries move with `shift` (new mask data for the same shapes)."""
    cuts = torch.tensor([seqlen // 3 + shift, 2 * seqlen // 3 + shift, seqlen])
    position = torch.arange(seqlen)
    document = torch.searchsorted(cuts, position, right=True)
    starts = torch.cat([torch.tensor([0]), cuts[:-1]])
    return (starts[document].to(device, torch.int32), cuts[document].to(device, torch.int32),
            document.to(device, torch.int32))


def inputs(seqlen, device="cuda", dtype=None, seed=0):
    """q, k, v (requires grad), a gradient weight for o, and every mask kind's tensors."""
    dtype = dtype or torch.bfloat16
    generator = torch.Generator(device="cpu").manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=generator).to(device, dtype).requires_grad_()

    q = rand(BATCH, seqlen, HEADS, HEAD_DIM)
    k = rand(BATCH, seqlen, KV_HEADS, HEAD_DIM)
    v = rand(BATCH, seqlen, KV_HEADS, HEAD_DIM)
    weight = torch.randn(BATCH, seqlen, HEADS, HEAD_DIM, generator=generator).to(device)
    start, end, document = document_bounds(seqlen, seed % 5, device)
    lts = end.view(1, 1, seqlen, 1).expand(BATCH, 1, seqlen, 1).contiguous()
    lts_ute = torch.stack([end, start], dim=1).view(1, 1, seqlen, 2)
    lts_ute = lts_ute.expand(BATCH, 1, seqlen, 2).contiguous()
    slopes = torch.linspace(0.05, 0.4, HEADS, device=device, dtype=torch.float32)
    return dict(q=q, k=k, v=v, weight=weight, lts=lts, lts_ute=lts_ute, document=document,
                slopes=slopes)


def cases(data):
    """(name, f, extra tensor inputs): f(q, k, v, *extra) calls attnjit.attention."""
    attention = attnjit.attention
    predicate = attnjit.predicate("q >= k && doc[q] == doc[k]", tensors={"doc": data["document"]})
    literal = attnjit.predicate("q - k < 37 && k <= q")
    seqlen = data["q"].shape[1]
    third = seqlen // 3
    flash = attnjit.flashmask("causal_document", seqlen=seqlen, batch=BATCH,
                              doc_lengths=[third, third, seqlen - 2 * third], device="cuda")
    return [
        ("none", lambda q, k, v: attention(q, k, v, deterministic=True), ()),
        ("causal", lambda q, k, v: attention(q, k, v, mask="causal", deterministic=True), ()),
        ("sliding_window", lambda q, k, v: attention(q, k, v, mask="sliding_window",
                                                     window=(32, 16), deterministic=True), ()),
        ("flashmask_causal_vectors",
         lambda q, k, v, lts: attention(q, k, v, mask="flashmask", causal=True,
                                        startend_row_indices=lts, deterministic=True),
         (data["lts"],)),
        ("flashmask_document_vectors",
         lambda q, k, v, lts_ute: attention(q, k, v, mask="flashmask",
                                            startend_row_indices=lts_ute, deterministic=True),
         (data["lts_ute"],)),
        ("flashmask_object", lambda q, k, v: attention(q, k, v, mask=flash, deterministic=True),
         ()),
        ("predicate_object_input",
         lambda q, k, v, mask: attention(q, k, v, mask=mask, deterministic=True), (predicate,)),
        ("predicate_literal", lambda q, k, v: attention(q, k, v, mask=literal,
                                                        deterministic=True), ()),
        ("score_modifiers",
         lambda q, k, v, slopes: attention(q, k, v, mask="causal", softcap=20.0,
                                           alibi_slopes=slopes, deterministic=True),
         (data["slopes"],)),
    ]


def run(f, data, extra):
    """o and (d_q, d_k, d_v) of f for loss = sum(o * weight)."""
    q, k, v = (data[name].detach().clone().requires_grad_() for name in ("q", "k", "v"))
    o = f(q, k, v, *extra)
    (o.float() * data["weight"]).sum().backward()
    return o.detach(), (q.grad, k.grad, v.grad)


@unittest.skipUnless(HAS_OPS, "needs PyTorch 2.4+ (torch.library.custom_op) and a CUDA device")
class TorchCompile(unittest.TestCase):
    def setUp(self):
        torch._dynamo.reset()

    def assert_same(self, actual, expected, what):
        o, grads = actual
        o_ref, grads_ref = expected
        self.assertTrue(torch.equal(o, o_ref),
                        f"{what}: o differs, max |diff| {(o - o_ref).abs().max().item()}")
        for name, grad, ref in zip(("d_q", "d_k", "d_v"), grads, grads_ref):
            self.assertTrue(torch.equal(grad, ref),
                            f"{what}: {name} differs, max |diff| {(grad - ref).abs().max()}")

    def test_compile_and_fullgraph_equal_eager_for_every_mask(self):
        data = inputs(192)
        for name, f, extra in cases(data):
            with self.subTest(mask=name):
                eager = run(f, data, extra)
                self.assert_same(run(torch.compile(f, fullgraph=True), data, extra), eager,
                                 f"{name} fullgraph")
                self.assert_same(run(torch.compile(f), data, extra), eager, name)

    def test_explain_counts_no_graph_break(self):
        data = inputs(128)
        for name, f, extra in cases(data):
            with self.subTest(mask=name):
                q, k, v = (data[n].detach().requires_grad_() for n in ("q", "k", "v"))
                explanation = torch._dynamo.explain(f)(q, k, v, *extra)
                self.assertEqual(explanation.graph_break_count, 0,
                                 f"{name}: {explanation.break_reasons}")
                self.assertEqual(explanation.graph_count, 1)

    def test_bound_predicate_tensors_are_graph_inputs(self):
        data = inputs(160)
        mask = attnjit.predicate("q >= k && doc[q] == doc[k]",
                                 tensors={"doc": data["document"]})

        def f(q, k, v, doc):
            return attnjit.attention(q, k, v, mask=mask.bind(doc=doc), deterministic=True)

        other = inputs(160, seed=3)["document"]
        eager = run(f, data, (other,))
        self.assert_same(run(torch.compile(f, fullgraph=True), data, (other,)), eager, "bind")

    def test_dynamic_shapes_and_new_mask_data_compile_no_kernel(self):
        def causal(q, k, v):
            return attnjit.attention(q, k, v, mask="causal", deterministic=True)

        def vectors(q, k, v, lts):
            return attnjit.attention(q, k, v, mask="flashmask", causal=True,
                                     startend_row_indices=lts, deterministic=True)

        def predicate(q, k, v, mask):
            return attnjit.attention(q, k, v, mask=mask, deterministic=True)

        def extra_of(name, data):
            if name == "vectors":
                return (data["lts"],)
            if name == "predicate":
                return (attnjit.predicate("q >= k && doc[q] == doc[k]",
                                          tensors={"doc": data["document"]}),)
            return ()

        functions = {"causal": causal, "vectors": vectors, "predicate": predicate}
        compiled = {name: torch.compile(f, dynamic=True) for name, f in functions.items()}
        warm = inputs(128)
        for name, f in compiled.items():
            run(f, warm, extra_of(name, warm))
            run(functions[name], warm, extra_of(name, warm))
        before = attnjit.cache_stats()
        for seqlen, seed in ((200, 1), (77, 2), (128, 4)):
            data = inputs(seqlen, seed=seed)
            for name, f in compiled.items():
                with self.subTest(mask=name, seqlen=seqlen):
                    extra = extra_of(name, data)
                    self.assert_same(run(f, data, extra), run(functions[name], data, extra),
                                     f"{name} S={seqlen}")
        after = attnjit.cache_stats()
        self.assertEqual(after["compiles"], before["compiles"])
        self.assertEqual(after["disk_hits"], before["disk_hits"])


@unittest.skipUnless(HAS_OPS, "needs PyTorch 2.4+ (torch.library.custom_op) and a CUDA device")
class CudaGraphs(unittest.TestCase):
    def capture(self, step):
        """A CUDA graph of step() after two warm-up calls on a side stream."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = step()
        return graph, outputs

    def check_forward(self, through_operators):
        attnjit._EAGER_DIRECT = not through_operators
        try:
            data = inputs(256)
            q, k, v = (data[n].detach().clone() for n in ("q", "k", "v"))
            lts = data["lts"]
            graph, o = self.capture(
                lambda: attnjit.forward(q, k, v, mask="flashmask", causal=True,
                                        startend_row_indices=lts))
            fresh = inputs(256, seed=7)
            for tensor, name in ((q, "q"), (k, "k"), (v, "v")):
                tensor.copy_(fresh[name].detach())
            graph.replay()
            torch.cuda.synchronize()
            expected = attnjit.forward(q, k, v, mask="flashmask", causal=True,
                                       startend_row_indices=lts)
            self.assertTrue(torch.equal(o, expected))
        finally:
            attnjit._EAGER_DIRECT = True

    def test_forward_capture_replays_eager(self):
        self.check_forward(through_operators=False)

    def test_forward_capture_through_the_operators(self):
        self.check_forward(through_operators=True)

    def test_forward_backward_capture_replays_eager(self):
        data = inputs(256)
        q, k, v = (data[n].detach().clone().requires_grad_() for n in ("q", "k", "v"))
        d_o = data["weight"].to(torch.bfloat16)

        def step():
            o = attnjit.attention(q, k, v, mask="causal", deterministic=True)
            return (o,) + torch.autograd.grad(o, (q, k, v), d_o)

        graph, outputs = self.capture(step)
        fresh = inputs(256, seed=9)
        with torch.no_grad():
            for tensor, name in ((q, "q"), (k, "k"), (v, "v")):
                tensor.copy_(fresh[name].detach())
        graph.replay()
        torch.cuda.synchronize()
        expected = step()
        for name, got, want in zip(("o", "d_q", "d_k", "d_v"), outputs, expected):
            self.assertTrue(torch.equal(got, want), f"{name} differs after replay")

    def test_no_host_synchronisation(self):
        data = inputs(128)
        q, k, v = (data[n].detach().clone().requires_grad_() for n in ("q", "k", "v"))
        attnjit.attention(q, k, v, mask="causal").sum().backward()  # compile, load
        torch.cuda.set_sync_debug_mode("error")
        try:
            o = attnjit.attention(q, k, v, mask="causal")
            o.backward(torch.ones_like(o))
            attnjit.forward(q.detach(), k.detach(), v.detach(), mask="causal")
        finally:
            torch.cuda.set_sync_debug_mode("default")


@unittest.skipUnless(HAS_OPS, "needs PyTorch 2.4+ (torch.library.custom_op) and a CUDA device")
class Workspace(unittest.TestCase):
    def allocations(self, call):
        """The allocations torch's caching allocator made for call() (after a warm-up call)."""
        call()
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        call()
        return torch.cuda.memory_stats()["allocation.all.allocated"] - before

    def test_scratch_memory_comes_from_torchs_allocator(self):
        data = inputs(1000)
        q, k, v = (data[n].detach() for n in ("q", "k", "v"))
        lts = data["lts"]
        # A FlashMask forward takes scratch (min/max tables, the CTA order), a causal one none:
        # the FlashMask call allocates o and one workspace tensor, the causal one only o.
        flashmask = self.allocations(
            lambda: attnjit.forward(q, k, v, mask="flashmask", causal=True,
                                    startend_row_indices=lts))
        causal = self.allocations(lambda: attnjit.forward(q, k, v, mask="causal"))
        self.assertEqual(flashmask, causal + 1)
        # The backward's workspace holds the fp32 dQ accumulator: B*H*Sq*d*4 bytes at least, and
        # the peak allocation of a backward grows by at least that much.
        qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
        # Only this test's launches (other tests of the process prepared theirs before).
        attnjit._launch._calls.clear()
        o = attnjit.attention(qg, kg, vg, mask="flashmask", causal=True, startend_row_indices=lts)
        d_o = torch.randn_like(o)
        o.backward(d_o)
        workspaces = [call.launch.workspace for call in attnjit._launch._calls.values()]
        self.assertGreaterEqual(max(workspaces), BATCH * HEADS * 1000 * HEAD_DIM * 4)
        o = attnjit.attention(qg, kg, vg, mask="flashmask", causal=True, startend_row_indices=lts)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        o.backward(d_o)
        torch.cuda.synchronize()
        self.assertGreaterEqual(torch.cuda.max_memory_allocated() - base, max(workspaces))


@unittest.skipUnless(HAS_OPS, "needs PyTorch 2.4+ (torch.library.custom_op) and a CUDA device")
class DevicesAndErrors(unittest.TestCase):
    def test_explicit_cuda0(self):
        data = inputs(128, device="cuda:0")
        o, grads = run(lambda q, k, v: attnjit.attention(q, k, v, mask="causal"), data, ())
        self.assertEqual(o.device, torch.device("cuda:0"))
        self.assertTrue(all(g.device == torch.device("cuda:0") for g in grads))
        compiled = run(torch.compile(lambda q, k, v: attnjit.attention(q, k, v, mask="causal"),
                                     fullgraph=True), data, ())
        self.assertTrue(torch.equal(compiled[0], o))

    @unittest.skipUnless(HAS_OPS and torch.cuda.device_count() > 1, "needs a second GPU")
    def test_second_device_runs_there(self):
        data0 = inputs(128, device="cuda:0")
        data1 = inputs(128, device="cuda:1")
        f = lambda q, k, v: attnjit.attention(q, k, v, mask="causal", deterministic=True)  # noqa
        with torch.cuda.device(0):  # torch's current device is not the tensors' one
            o1, grads1 = run(f, data1, ())
        o0, grads0 = run(f, data0, ())
        self.assertEqual(o1.device, torch.device("cuda:1"))
        self.assertTrue(torch.equal(o1.cpu(), o0.cpu()))
        for g1, g0 in zip(grads1, grads0):
            self.assertTrue(torch.equal(g1.cpu(), g0.cpu()))

    def test_cpu_tensor_and_mixed_devices_name_the_tensor(self):
        data = inputs(64)
        q, k, v = (data[n].detach() for n in ("q", "k", "v"))
        for function in (attnjit.attention, attnjit.forward):
            with self.subTest(function=function.__name__):
                with self.assertRaisesRegex(attnjit.AttnjitError,
                                            r"^q: on device cpu; accepted: a CUDA device"):
                    function(q.cpu(), k, v)
                with self.assertRaisesRegex(attnjit.AttnjitError,
                                            r"^v: on device cpu; accepted: a CUDA device"):
                    function(q, k, v.cpu())
                with self.assertRaisesRegex(attnjit.AttnjitError,
                                            r"^startend_row_indices: on device cpu"):
                    function(q, k, v, mask="flashmask", causal=True,
                             startend_row_indices=data["lts"].cpu())
        with self.assertRaisesRegex(attnjit.AttnjitError, r"^tensors\['doc'\]: on device cpu"):
            attnjit.attention(q, k, v, mask=attnjit.predicate(
                "doc[q] == doc[k]", tensors={"doc": data["document"].cpu()}))
        # The operators' real implementations check the devices too.
        with self.assertRaisesRegex(attnjit.AttnjitError, r"k: on device cpu|k: on cpu"):
            torch.ops.attnjit.forward(q, k.cpu(), v, None, None, "none", False, 0.0, -1, 0, 0.0,
                                      False, "", None)

    def test_fake_tensor_shape_mismatch_is_one_clear_error(self):
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            q = torch.empty(1, 128, 4, 64, dtype=torch.bfloat16, device="cuda")
            k = torch.empty(1, 128, 2, 32, dtype=torch.bfloat16, device="cuda")
            v = torch.empty(1, 128, 2, 64, dtype=torch.bfloat16, device="cuda")
            message = (r"^k: shape \(1, 128, 2, 32\) differs from q \(1, 128, 4, 64\) in batch "
                       r"or head_dim$")
            with self.assertRaisesRegex(attnjit.AttnjitError, message):
                attnjit.attention(q, k, v)
            with self.assertRaisesRegex(attnjit.AttnjitError, message):
                torch.ops.attnjit.attention(q, k, v, None, None, "none", False, 0.0, -1, 0, 0.0,
                                            False, None)
            lts = torch.empty(1, 1, 100, 1, dtype=torch.int32, device="cuda")
            with self.assertRaisesRegex(attnjit.AttnjitError,
                                        r"^startend_row_indices: shape \(1, 1, 100, 1\); "
                                        r"accepted: \[B=1, Hm in \(1, 2\), Sk=128, C\]"):
                torch.ops.attnjit.forward(q, v, v, lts, None, "flashmask", True, 0.0, -1, 0,
                                          0.0, False, "", None)

        def f(q, k, v):  # the operator itself: its fake implementation runs while tracing
            return torch.ops.attnjit.attention(q, k, v, None, None, "causal", False, 0.0, -1, 0,
                                               0.0, False, None)

        q = torch.randn(1, 64, 4, 64, dtype=torch.bfloat16, device="cuda")
        k = torch.randn(1, 64, 3, 64, dtype=torch.bfloat16, device="cuda")
        with self.assertRaises(Exception) as caught:
            torch.compile(f, fullgraph=True)(q, k, k)
        chain, error = [], caught.exception
        while error is not None:
            chain.append(str(error))
            error = error.__cause__ or error.__context__
        self.assertTrue(any("k: 3 heads; accepted: a divisor of q's 4 heads" in text
                            for text in chain), chain)

    def test_eager_operators_equal_direct_launches(self):
        data = inputs(128)
        for name, f, extra in cases(data):
            with self.subTest(mask=name):
                direct = run(f, data, extra)
                attnjit._EAGER_DIRECT = False
                try:
                    through = run(f, data, extra)
                finally:
                    attnjit._EAGER_DIRECT = True
                self.assertTrue(torch.equal(direct[0], through[0]))
                for got, want in zip(through[1], direct[1]):
                    self.assertTrue(torch.equal(got, want))


if __name__ == "__main__":
    unittest.main()
