"""GPU checks of ``diagnose``; prints what it saw and exits 0 when every expectation holds.

1. A 2-D ``scatter_add_`` (float atomics, no deterministic CUDA kernel) under full seeding:
   PyTorch flags it, the runs diverge (cause compute), localized to module ``pool``.
2. ``index_add_`` under full seeding reproduces, and the ablation finds
   ``deterministic_algorithms`` needed.
3. ``index_add_`` with deterministic algorithms off: localized to ``pool``, op ``aten::index_add``.
4. The reference MNIST workload on CUDA (embedded subset, one epoch) reproduces under full seeding.
5. The reference workload ``--across device=cpu,cuda``: the first divergent step, the op and
   module where the CPU and the GPU part, and the loss drift.
0. First, fingerprints on the device: the same digest as on the CPU, no synchronisation while a
   step's fingerprints are taken (``torch.cuda.set_sync_debug_mode("error")``), one copy when a
   batch of them is resolved, and the rate for 1M, 10M and 100M float32 parameters.

Run from the repository root: ``python scripts/gpu_check.py [--quick]`` (``--quick``: the
reference workload stops after 50 steps). Without CUDA it says so and exits 0.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FIXTURE = ROOT / "fixtures" / "zoo" / "cuda_atomics.py"
failures: list[str] = []


def expect(what: str, ok: bool, seen: Any) -> None:
    print(f"  [{'ok' if ok else 'FAIL'}] {what}: {seen}")
    if not ok:
        failures.append(what)


def brief(report: Any) -> dict[str, Any]:
    d = report.to_dict()
    keys = ("reproducible", "first_divergent_step", "divergent_signal", "cause", "culprit",
            "culprit_op", "flagged_ops", "necessary_components", "error", "steps")
    return {k: d.get(k) for k in keys}


def device_fingerprints(torch: Any) -> None:
    from repro_check.trace import fingerprint
    from repro_check.child.seeding import rngstate

    print("0. fingerprints on the device")
    g = torch.Generator().manual_seed(0)
    host = torch.randn(1_000_003, generator=g)
    on_gpu = host.cuda()
    expect("digest equals the CPU's", torch.equal(fingerprint.device_digest(on_gpu).cpu(),
                                                  fingerprint.device_digest(host)), "compared")
    params = [(f"p{i}", torch.randn(256, 256, device="cuda")) for i in range(8)]
    batch = [torch.randn(64, 784, device="cuda"), torch.arange(64, device="cuda")]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        taken = [fingerprint.tensors(params, defer=True), fingerprint.nested(batch, defer=True),
                 rngstate.signals(True)]
        synced = None
    except RuntimeError as e:
        taken, synced = [], str(e).splitlines()[0]
    finally:
        torch.cuda.set_sync_debug_mode(0)
    expect("no synchronisation while fingerprinting a step", synced is None, synced or "none")
    if taken:
        texts = fingerprint.resolve(taken[:2])
        expect("resolved to the immediate fingerprints",
               texts == [fingerprint.tensors(params), fingerprint.nested(batch)], texts)
    # a whole training loop under capture: nothing synchronises until the held steps are flushed
    from repro_check.child.observe import capture

    events: list[dict[str, Any]] = []
    recorder = capture.Recorder(events.append)
    recorder.FLUSH_EVERY = 1000
    recorder.FLUSH_SECONDS = 3600.0
    recorder.install()
    model = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=0.002)
    loader = torch.utils.data.DataLoader(  # batches built on the GPU: no host copies in the loop
        torch.utils.data.TensorDataset(torch.randn(640, 784, device="cuda"),
                                       torch.randint(0, 10, (640,), device="cuda")),
        batch_size=64)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        synced = None
    except RuntimeError as e:
        synced = str(e).splitlines()[0]
    finally:
        torch.cuda.set_sync_debug_mode(0)
    held = recorder.held
    recorder.flush()
    recorder.uninstall()
    expect("a training loop under capture never synchronises", synced is None, synced or "none")
    expect("its 10 steps were held, then emitted with text fingerprints",
           held == 10 and all(isinstance(e["signals"]["params"], str) for e in events if "step" in e)
           and sum("step" in e for e in events) == 10, f"held {held}")
    for n, pieces in ((1_000_000, 1), (10_000_000, 1), (100_000_000, 1), (10_000_000, 200)):
        named = [(f"p{i}", torch.randn(n // pieces, device="cuda")) for i in range(pieces)]
        fingerprint.tensors(named)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(5):
            fingerprint.tensors(named)
        torch.cuda.synchronize()
        took = (time.perf_counter() - start) / 5
        print(f"  {n:>12,} float32 parameters in {pieces:>3} tensors: {took * 1e3:8.2f} ms, "
              f"{n * 4 / took / 1e9:7.1f} GB/s")
        del named


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: CUDA is not available on this machine; nothing was run.")
        return 0
    from repro_check.api import across, check
    from repro_check.commands.diagnose import diagnose

    print(f"gpu_check: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    quick = "--quick" in sys.argv[1:]
    traces = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    target = f"{FIXTURE}:main"
    t0 = time.time()

    device_fingerprints(torch)

    print("1. scatter_add_ (2-D) under full seeding")
    r = diagnose(target, args=["--op", "scatter_add"], ablate=[], trace_dir=traces / "1")
    d = brief(r)
    print("  " + json.dumps(d))
    expect("flagged by PyTorch", any("scatter_add" in f["op"] for f in d["flagged_ops"] or []),
           [f["op"] for f in d["flagged_ops"] or []])
    expect("cause compute", d["cause"] == "compute", d["cause"])
    expect("culprit module pool", d["culprit"] == "pool", d["culprit"])
    expect("culprit op scatter_add", "scatter_add" in str(d["culprit_op"]), d["culprit_op"])

    print("2. index_add_ under full seeding, ablation of deterministic_algorithms")
    r = diagnose(target, args=["--op", "index_add"], ablate=["deterministic_algorithms"],
                 trace_dir=traces / "2")
    d = brief(r)
    print("  " + json.dumps(d))
    expect("reproducible", d["reproducible"] is True, d["reproducible"])
    expect("deterministic_algorithms needed", d["necessary_components"] == ["deterministic_algorithms"],
           d["necessary_components"])

    print("3. index_add_ with deterministic algorithms off")
    r = diagnose(target, args=["--op", "index_add"], without=["deterministic_algorithms"],
                 ablate=[], trace_dir=traces / "3")
    d = brief(r)
    print("  " + json.dumps(d))
    expect("cause compute", d["cause"] == "compute", d["cause"])
    expect("culprit module pool", d["culprit"] == "pool", d["culprit"])
    expect("culprit op index_add", "index_add" in str(d["culprit_op"]), d["culprit_op"])

    print("4. reference workload on CUDA, full seeding")
    r = check("repro_check.workloads.mnist:main", seed=123, max_steps=50 if quick else None,
              trace_dir=traces / "4")
    d = brief(r)
    print("  " + json.dumps({k: d[k] for k in ("reproducible", "steps", "error")}))
    expect("reproducible", d["reproducible"] is True, d["reproducible"])
    env = (r.results[0].header or {}).get("environment", {})
    expect("ran on CUDA", env.get("device") == "cuda", env.get("device_name"))

    print("5. reference workload across device=cpu,cuda")
    r = across("repro_check.workloads.mnist:main", ["device=cpu,cuda"], seed=123,
               max_steps=50 if quick else None, trace_dir=traces / "5")
    pair = r.across.pairs[0] if r.across and r.across.pairs else None
    drift = pair.drift.to_dict() if pair and pair.drift else None
    print("  " + json.dumps({"error": r.error, "identical": pair and pair.identical,
                             "first_divergent_step": pair and pair.first_divergent_step,
                             "signal": pair and pair.signal, "culprit": pair and pair.culprit,
                             "culprit_op": pair and pair.culprit_op, "drift": drift}))
    devices = [c.versions.get("device") for c in r.across.cells] if r.across else []
    expect("ran on the CPU, then on CUDA", devices == ["cpu", "cuda"], devices)
    expect("no run failed", r.error is None, r.error)
    if pair is not None and not pair.identical:
        expect("the op where they part is named", pair.culprit_op is not None,
               (pair.localization or {}).get("detail"))
        expect("the drift is measured", drift is not None, drift)

    print(f"gpu_check: {len(failures)} failed in {time.time() - t0:.0f} s; traces in {traces}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
