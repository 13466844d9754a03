"""Predicate masks: an element predicate over (b, h, q, k), or any mask of the mask language, as
the attention mask.

    mask = attnjit.predicate("q >= k && doc[q] == doc[k]", tensors={"doc": doc_ids})
    o = attnjit.attention(q, k, v, mask=mask)   # differentiable, like any other mask

An element predicate is nonzero where key k is visible to query q of (batch b, query head h)
(FlexAttention's mask_mod convention); docs/masks.md describes the language. Its literals
become runtime scalars, so predicates that differ only in literals, and new tensor contents,
reuse the compiled kernels. Its tensors are int32 CUDA tensors [length] or [rows, length]
(rows 1 or the batch size: row b is read in batch b); an index outside [0, length) reads 0.

The text may also be any mask of the language `attnc mask` reads: families such as
`document([4,3,3])` and their intersections `&` and unions `|` with each other and with
predicates. Such a mask is built on the host for each (batch, Sq, Sk) it runs with -- into
FlashMask vectors where they can hold it, else into a predicate and the tensors its families
generate -- and copied to the device once; its tensors are host values (lists of ints, or
tensors, read back to the host).

>>> import attnjit
>>> mask = attnjit.predicate("q - k < 256 && doc[q] == doc[k]", tensors={"doc": None})
>>> mask.mask_text, mask.scalars, mask.names
('predicate(q-k<$0&&doc[q]==doc[k])', [256], ['doc'])
>>> union = attnjit.predicate("document([4,3,3]) | sliding_window(2)")
>>> union.build(batch=1, seqlen_q=10)
PredicateMask('document([4,3,3]) | sliding_window(2)',
              mask='predicate(_doc0[q]==_doc0[k]||q>=k&&q-k<$0)', scalars=[2], tensors=['_doc0'])
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Union

import json

from . import _ffi, _language
from .builders import FlashMask, _Handle

# Masks of the language kept per (batch, seqlen_q, seqlen_k, device) before starting over.
_BUILT_LIMIT = 64


class PredicateMask:
    """A mask given as text: an element predicate (its lifted structure -- the spec's mask --,
    the literals' values and the tensors bound to its names), or a mask of the mask language
    that build() turns into a FlashMask or an element predicate for one problem size. Build one
    with attnjit.predicate().

    expression: the text; language: whether it is a mask of the language (families, & or |)
    rather than one element predicate; form: "predicate" for an element predicate, else the
    language's form of the text ("none", "causal", "intervals" or "predicate"); mask_text: the
    spec's mask; structure: an element predicate's lifted text (None for the language); scalars:
    the literals' values; names: the tensors it reads; tensors: name -> the tensor bound to it.
    """

    def __init__(self, expression: str, tensors: Optional[Mapping[str, Any]],
                 _lifted: Optional[tuple] = None):
        if not isinstance(expression, str):
            raise TypeError(f"expression: expected a str, got {type(expression).__name__}")
        if tensors is None:
            tensors = {}
        if not isinstance(tensors, dict):
            raise TypeError(f"tensors: expected a dict of name -> int32 tensor, got "
                            f"{type(tensors).__name__}")
        self.expression = expression
        self._built: Dict[tuple, Union[FlashMask, PredicateMask]] = {}
        if _lifted is None:
            parsed = _language.parse(expression)
            if parsed["element"]:
                lifted = _lift(expression)
                _lifted = (lifted["structure"], lifted["scalars"], lifted["tensors"])
            else:
                self.language = True
                self.form = parsed["form"]
                self.mask_text = parsed["mask"]
                self.structure = None
                self.scalars = list(parsed["scalars"])
                self.names = list(parsed["tensors"])
                self.tensors = self._checked(tensors)
                return
        self.language = False
        self.form = "predicate"
        self.structure = _lifted[0]
        self.mask_text = f"predicate({self.structure})"
        self.scalars = list(_lifted[1])
        self.names = list(_lifted[2])
        self.tensors = self._checked(tensors)

    def _checked(self, tensors: Mapping[str, Any]) -> Dict[str, Any]:
        missing = [name for name in self.names if name not in tensors]
        extra = [name for name in tensors if name not in self.names]
        if missing or extra:
            raise ValueError(f"tensors: got {sorted(tensors)}; accepted: exactly the tensors "
                             f"the predicate reads, {self.names}")
        return {name: tensors[name] for name in self.names}

    def bind(self, **tensors: Any) -> PredicateMask:
        """This predicate with other tensors bound to (some of) its names, without parsing it
        again: e.g. inside a torch.compile'd function whose inputs are the tensors,
        `attnjit.attention(q, k, v, mask=mask.bind(doc=doc))`."""
        if self.language:
            return PredicateMask(self.expression, {**self.tensors, **tensors})
        return PredicateMask(self.expression, {**self.tensors, **tensors},
                             (self.structure, self.scalars, self.names))

    def build(self, batch: int, seqlen_q: int, seqlen_k: Optional[int] = None,
              device: Any = None) -> Union[FlashMask, PredicateMask]:
        """The mask for `batch` samples of seqlen_q queries and seqlen_k (default seqlen_q) keys:
        an element predicate is itself; a mask of the language is built on the host into a
        FlashMask (its vectors) or an element predicate over its tensors (the generated ones
        included), as torch tensors on `device` when given, else as nested lists. Kept, so a
        second call with the same sizes and device returns the same object. attnjit.attention
        and attnjit.forward call it with q's and k's sizes and q's device."""
        if not self.language:
            return self
        seqlen_k = seqlen_q if seqlen_k is None else seqlen_k
        key = (batch, seqlen_q, seqlen_k, None if device is None else str(device))
        built = self._built.get(key)
        if built is None:
            built = self._build(batch, seqlen_q, seqlen_k, device)
            if len(self._built) >= _BUILT_LIMIT:
                self._built.clear()
            self._built[key] = built
        return built

    def _build(self, batch, seqlen_q, seqlen_k, device):
        host = _language.build(self.expression, batch, seqlen_q, seqlen_k, self.tensors)
        info = host.info
        if info["form"] == "intervals":
            return FlashMask(self.expression, seqlen_k, batch, 1, _Handle(host.intervals()),
                             device)
        if info["form"] != "predicate":
            built = FlashMask(info["mask"], seqlen_k, batch, 1)
            built.family = self.expression
            return built
        names = [t["name"] for t in info["tensors"]]
        values = [host.tensor(i) for i in range(len(names))]
        if device is not None:
            import torch

            values = [torch.tensor(v, dtype=torch.int32, device=device) for v in values]
        return PredicateMask(self.expression, dict(zip(names, values)),
                             (info["predicate"], info["scalars"], names))

    def __repr__(self) -> str:
        return (f"PredicateMask({self.expression!r}, mask={self.mask_text!r}, "
                f"scalars={self.scalars}, tensors={self.names})")


def _lift(expression: str) -> Dict[str, Any]:
    """attnjit_predicate_lift of an element predicate: {"structure", "scalars", "tensors"}."""
    return json.loads(_ffi.read_text(_ffi.lib.attnjit_predicate_lift,
                                     _ffi.text_argument("expression", expression)))


def predicate(expression: str, tensors: Optional[Mapping[str, Any]] = None) -> PredicateMask:
    """A mask for attnjit.attention / attnjit.forward given as text: an element predicate over
    b, h, q, k (nonzero: visible), `tensors` a dict from the names it reads to int32 CUDA
    tensors; or any mask of the mask language (families, & and |), `tensors` then host values
    (lists of ints, or tensors). See the module's documentation.

    >>> attnjit.predicate("(q - k) % 64 != 0")
    PredicateMask('(q - k) % 64 != 0', mask='predicate((q-k)%$0!=$1)', scalars=[64, 0], tensors=[])
    """
    return PredicateMask(expression, tensors)
