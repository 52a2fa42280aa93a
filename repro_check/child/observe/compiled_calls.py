"""What PyTorch itself records inside a compiled model: ``torch.utils._debug_mode.DebugMode``
with its tensor hashes, entered while the probe's compiled model runs compiled.

The probe's op recorder steps aside while a ``torch.compile`` model runs (under a dispatch mode
of its own, PyTorch would run the compiled code eagerly). DebugMode does not force that (it
ignores compile internals) and still sees what the compiled code dispatches: the ATen ops
inductor's wrapper calls (``addmm``, ``convolution``, ... its extern kernels), the ops of an
``aot_eager`` graph (run through DebugMode's interpreter), the eager code between graphs at a
graph break, and on a GPU every Triton kernel with the hashes of its arguments after it ran.
What inductor fused into its own C++ kernels on the CPU is not dispatched and not seen.

Each call is kept with the fingerprints of its inputs and of its output (exact, as every
fingerprint is), so the parent can name the first call inside the compiled model whose output
differs between two runs, and tell whether its inputs already did. Private PyTorch API:
looked for, never relied on; without it the record says so.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

from repro_check.trace.probes import CALLS_LIMIT as LIMIT

#: the most graph break reasons one record carries, each cut to its first lines
BREAKS = 8


def _hashes(value: Any) -> str:
    """A call's hashes as one text (a tensor's fingerprint, or a tuple of them)."""
    if isinstance(value, dict):
        return ";".join(f"{k}={v}" for k, v in sorted(value.items()))
    return value if isinstance(value, str) else repr(value)


def _inputs(value: Any) -> Any:
    """A call's input hashes without what it only writes: an ``out=`` buffer (an op's) or an
    ``out_ptr`` (a Triton kernel's) holds whatever memory held before the call."""
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if not str(k).startswith("out")}
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], dict):
        return value[0], _inputs(value[1])
    return value


def _call(call: Any) -> tuple[str, str, str] | None:
    """(name, fingerprint of its inputs, of what it returned) of one DebugMode call; None for
    its annotations and anything else that is no op or kernel."""
    kernel = getattr(call, "kernel_name", None)
    if isinstance(kernel, str):  # a Triton kernel: its arguments' hashes before and after
        return (f"triton {kernel}", _hashes(_inputs(getattr(call, "pre_hashes", None) or {})),
                _hashes(getattr(call, "post_hashes", None) or {}))
    op = getattr(call, "op", None)
    if op is None:
        return None
    log = getattr(call, "log", None)
    log = log if isinstance(log, dict) else {}
    return str(op), _hashes(_inputs(log.get("input_hash"))), _hashes(log.get("hash"))


def _counters() -> Any:
    """Dynamo's own counters, where this process loaded dynamo (never imports it)."""
    return getattr(sys.modules.get("torch._dynamo.utils"), "counters", None)


def unique_graphs() -> int:
    """The graphs dynamo has captured in this process so far (0: it compiled nothing)."""
    counters = _counters()
    return int(counters.get("stats", {}).get("unique_graphs", 0) or 0) if counters else 0


def graphs() -> dict[str, Any]:
    """How dynamo split what this process compiled: its graphs so far and why it broke them
    (the first lines of each reason)."""
    counters = _counters()
    if counters is None:
        return {}
    reasons = []
    for reason in list(counters.get("graph_break", {}))[:BREAKS]:
        lines = [line.strip() for line in str(reason).splitlines() if line.strip()]
        said = lines[0] if lines else "?"
        explained = next((line for line in lines if line.startswith("Explanation:")), None)
        if explained:  # its first sentence
            said += " (" + re.split(r"(?<=[.`])\s+(?=[A-Z])",
                                    explained[len("Explanation:"):].strip())[0] + ")"
        reasons.append(said[:300])
    return {"graphs": unique_graphs(), "breaks": reasons}


class CompiledCalls:
    """DebugMode entered while one compiled model runs: :meth:`start` as it starts,
    :meth:`stop` as it returns (the record's body). ``digest``: the fingerprint of one tensor
    (the probe's, so a call's tensors read as the op recorder's do)."""

    def __init__(self, digest: Callable[[Any], str]) -> None:
        self.digest = digest
        self._mode: Any = None
        self._hashes: Any = None
        #: why no call was recorded (this torch has no DebugMode, it failed)
        self.missing: str | None = None

    def start(self) -> None:
        try:
            # private to torch (2.9 and later): looked for, never relied on
            from torch.utils._debug_mode import DebugMode
        except ImportError:
            self.missing = "this torch has no torch.utils._debug_mode"
            return
        try:
            mode = DebugMode(record_output=False, record_profiler_context=False,
                             run_compile_with_interpreter=True)
            hashes = DebugMode.log_tensor_hashes(hash_fn=self.digest, hash_inputs=True)
            mode.__enter__()
            try:
                hashes.__enter__()
            except Exception:
                mode.__exit__(None, None, None)
                raise
        except Exception as e:  # noqa: BLE001 - never break the target
            self.missing = f"DebugMode could not be entered ({type(e).__name__})"
            return
        self._mode, self._hashes = mode, hashes

    def stop(self) -> dict[str, Any]:
        """Leave DebugMode; the calls it saw, in order, as ``[name, inputs, output]`` (their
        fingerprints), or why there are none (``missing``)."""
        mode, hashes = self._mode, self._hashes
        self._mode = self._hashes = None
        if mode is None:
            return {"missing": self.missing or "not recorded"}
        try:
            hashes.__exit__(None, None, None)
        finally:
            mode.__exit__(None, None, None)
        calls = [c for c in map(_call, list(mode.operators)) if c is not None]
        return {"calls": [list(c) for c in calls[:LIMIT]], "n": len(calls), **graphs()}
