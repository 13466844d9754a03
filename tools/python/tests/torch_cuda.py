"""What the GPU tests share: PyTorch when it is installed (else None) and whether it sees a
CUDA device."""

import importlib.util

torch = None
if importlib.util.find_spec("torch") is not None:
    import torch

HAS_CUDA = torch is not None and torch.cuda.is_available()
