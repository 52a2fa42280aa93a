"""Whether torch.compile is tracing right now.

While dynamo or AOTAutograd trace a compiled model, the script's code and PyTorch's own run on
tracing tensors (``FunctionalTensor``, ``FakeTensor``): AOTAutograd calls
``torch.autograd.grad`` to trace the backward, modules' hooks run, and so on. What a hook sees
then is the trace, not the run: it records nothing and counts nothing, so a compiled and an
eager run number their steps alike and fingerprint only real values.
"""

from __future__ import annotations

import sys


def compiling() -> bool:
    """Whether torch.compile is tracing right now (never imports torch itself)."""
    compiler = getattr(sys.modules.get("torch"), "compiler", None)
    return bool(compiler is not None and compiler.is_compiling())
