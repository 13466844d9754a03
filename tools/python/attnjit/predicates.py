"""Predicate masks: an element predicate over (b, h, q, k) as the attention mask.

    mask = attnjit.predicate("q >= k && doc[q] == doc[k]", tensors={"doc": doc_ids})
    o = attnjit.attention(q, k, v, mask=mask)   # differentiable, like any other mask

The expression is nonzero where key k is visible to query q of (batch b, query head h)
(FlexAttention's mask_mod convention); README.md describes the language. Its literals become
runtime scalars, so predicates that differ only in literals, and new tensor contents, reuse
the compiled kernels. Tensors are int32 CUDA tensors [length] or [rows, length] (rows 1 or
the batch size: row b is read in batch b); an index outside [0, length) reads 0.
"""
import json

from . import _ffi


class PredicateMask:
    """A parsed predicate: its lifted structure (the spec's mask), the literals' values and the
    tensors bound to its names. Build one with attnjit.predicate()."""

    def __init__(self, expression, tensors, _lifted=None):
        if not isinstance(expression, str):
            raise TypeError(f"expression: expected a str, got {type(expression).__name__}")
        if tensors is None:
            tensors = {}
        if not isinstance(tensors, dict):
            raise TypeError(f"tensors: expected a dict of name -> int32 tensor, got "
                            f"{type(tensors).__name__}")
        if _lifted is None:
            lifted = json.loads(_ffi.read_text(_ffi.lib.attnjit_predicate_lift,
                                               _ffi.text_argument("expression", expression)))
            _lifted = (lifted["structure"], lifted["scalars"], lifted["tensors"])
        self.expression = expression
        self.structure = _lifted[0]
        self.scalars = list(_lifted[1])
        self.names = list(_lifted[2])
        missing = [name for name in self.names if name not in tensors]
        extra = [name for name in tensors if name not in self.names]
        if missing or extra:
            raise ValueError(f"tensors: got {sorted(tensors)}; accepted: exactly the tensors "
                             f"the predicate reads, {self.names}")
        self.tensors = {name: tensors[name] for name in self.names}

    def bind(self, **tensors):
        """This predicate with other tensors bound to (some of) its names, without parsing it
        again: e.g. inside a torch.compile'd function whose inputs are the tensors,
        `attnjit.attention(q, k, v, mask=mask.bind(doc=doc))`."""
        return PredicateMask(self.expression, {**self.tensors, **tensors},
                             (self.structure, self.scalars, self.names))

    def __repr__(self):
        return f"attnjit.predicate({self.expression!r}, tensors={sorted(self.tensors)})"


def predicate(expression, tensors=None):
    """A predicate mask for attnjit.attention / attnjit.forward: `expression` over b, h, q, k
    (nonzero: visible), `tensors` a dict from the names it reads to int32 CUDA tensors."""
    return PredicateMask(expression, tensors)
