"""attnjit.attention_with_kvcache without PyTorch or a GPU: its scalar arguments and the
pairing of k and v are checked (and num_splits=None accepted) before a tensor is needed, and the
operator module defines no operator on a PyTorch without torch.library.custom_op.
test_kvcache_gpu.py runs the call.
"""

import importlib
import sys
import types
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attnjit  # noqa: E402


def attention_with_kvcache(**kwargs):
    """attention_with_kvcache with lists for tensors: a call that passes the scalar checks
    stops at q (not a torch.Tensor)."""
    return attnjit.attention_with_kvcache([1.0], [1.0], [1.0], **kwargs)


class ArgumentTest(unittest.TestCase):
    def test_exported(self):
        self.assertIn("attention_with_kvcache", attnjit.__all__)

    def test_refusals_before_needing_torch(self):
        cases = [
            (TypeError, r"^num_splits: expected an int or None, got float$",
             dict(num_splits=1.5)),
            (TypeError, r"^num_splits: expected an int or None, got bool$",
             dict(num_splits=True)),
            (attnjit.AttnjitError, r"^num_splits: got 2147483648; accepted: an int from",
             dict(num_splits=2**31)),
            (TypeError, r"^causal: expected a bool, got int$", dict(causal=1)),
            (TypeError, r"^return_lse: expected a bool, got NoneType$", dict(return_lse=None)),
            (TypeError, r"^window_size: expected a pair of ints \(left, right\), got \(1,\)$",
             dict(window_size=(1,))),
            (ValueError, r"^window_size: got \(-2, 0\); accepted: sizes >= 0, or -1",
             dict(window_size=(-2, 0))),
            (attnjit.AttnjitError, r"^window_size\[0\]: got 2147483648",
             dict(window_size=(2**31, 0))),
            (ValueError, r"^softmax_scale: got -1.0; accepted: a finite number > 0, or None "
                         r"for 1/sqrt\(head_dim\)$", dict(softmax_scale=-1.0)),
            (TypeError, r"^softcap: expected a float or None, got str$", dict(softcap="30")),
            (attnjit.AttnjitError, r"^v: None while k is given; accepted: k and v together "
                                   r"\(the new keys and values to append\), or neither$",
             dict(k=[1.0])),
            (attnjit.AttnjitError, r"^k: None while v is given", dict(v=[1.0])),
            (attnjit.AttnjitError, r"^max_seqlen_q: got 4; accepted: None without "
                                   r"cu_seqlens_q$", dict(max_seqlen_q=4)),
            (TypeError, r"^max_seqlen_q: expected an int with cu_seqlens_q \(the most new "
                        r"tokens of a sequence\), got NoneType$", dict(cu_seqlens_q=[0, 1])),
            (attnjit.AttnjitError, r"^max_seqlen_q: got 2147483648",
             dict(cu_seqlens_q=[0, 1], max_seqlen_q=2**31)),
        ]
        for error, message, kwargs in cases:
            with self.subTest(**{k: repr(v) for k, v in kwargs.items()}):
                with self.assertRaisesRegex(error, message):
                    attention_with_kvcache(**kwargs)

    def test_accepted_scalars_reach_the_tensor_checks(self):
        for kwargs in (dict(num_splits=None), dict(num_splits=0), dict(num_splits=7),
                       dict(causal=True, window_size=(128, -1), softmax_scale=0.125,
                            softcap=30.0, return_lse=True)):
            with self.subTest(**{k: repr(v) for k, v in kwargs.items()}):
                with self.assertRaisesRegex(TypeError, r"^q: expected a torch.Tensor, got list"):
                    attention_with_kvcache(**kwargs)


def operators_module():
    """The module attnjit/_ops.py. Importing it sets the package's attribute _ops, which holds
    torch.ops.attnjit (or None) instead: restored here."""
    saved = attnjit._ops
    try:
        return importlib.import_module("attnjit._ops")
    finally:
        attnjit._ops = saved


class OperatorTest(unittest.TestCase):
    def test_no_operators_without_custom_op(self):
        torch = types.SimpleNamespace(library=types.SimpleNamespace())
        self.assertIsNone(operators_module().register(torch, None, None, None, None, None))


if __name__ == "__main__":
    unittest.main()
