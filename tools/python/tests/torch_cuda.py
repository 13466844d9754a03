"""What the GPU tests share: PyTorch when it is installed (else None), whether it sees a
CUDA device, and the run seed of their random data."""

import importlib.util
import os
import random

torch = None
if importlib.util.find_spec("torch") is not None:
    import torch

HAS_CUDA = torch is not None and torch.cuda.is_available()


def run_seed():
    """ATTNJIT_TEST_SEED as a number, else (unset or 'random') a fresh one."""
    text = os.environ.get("ATTNJIT_TEST_SEED", "")
    if text and text != "random":
        if not text.isdigit():
            raise ValueError(f"ATTNJIT_TEST_SEED: got {text!r}; accepted: an unsigned number or "
                             "'random'")
        return int(text)
    return random.SystemRandom().randrange(1, 2**63)
