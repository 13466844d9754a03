"""libattnjit's family table (attnjit_mask_families): every mask family in order, its FlashMask
layout, its parameters and the fields its device builder reads. builders.py and masks.py take
the families from here, so Python restates none of them.
"""

import ctypes
import json

from . import _ffi

_ffi.lib.attnjit_mask_families.restype = ctypes.c_int
_ffi.lib.attnjit_mask_families.argtypes = [ctypes.c_char_p, ctypes.c_size_t]

# [{"name", "causal", "columns", "parameters": [{"name", "depth"}], "per_head",
#   "device_parameters"}], "full" and "causal" first (columns 0: no vectors).
TABLE = json.loads(_ffi.read_text(_ffi.lib.attnjit_mask_families))
