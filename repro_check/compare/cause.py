"""The root cause of a check's verdict, from what the comparison found first.

Rules, applied in this order:

``environment``
    the runs recorded different environments (versions, devices, thread counts, deterministic
    flags, the target's source hash; everything in the trace header's ``environment`` except
    :data:`VOLATILE`), and they are not reproducible. A different environment explains any later
    difference, so it is named before the signals.
``rng``
    the first difference is a global RNG stream's state at the start of a step (``rng.python``,
    ``rng.numpy``, ``rng.torch``, ``rng.cuda``): something draws from that stream unseeded, or a
    different number of times, before the batch or the loss could differ.
``data``
    the first difference is the batch the DataLoader yielded (shuffling, sampling, augmentation in
    the data pipeline, dataset order). Also a run that ended its loop earlier while the steps
    before agreed, when the workload uses a DataLoader (the loader yielded fewer batches).
``compute``
    the RNG states, the batch and the parameters going into the step agree (the step before
    agreed on its parameters), and the step's loss, gradients or updated parameters differ: a
    nondeterministic computation. Also a shorter run without a DataLoader.
``metrics``
    every step agrees and a final metric does not: the evaluation is not reproducible.
``none``
    reproducible.

A check whose target failed or that was interrupted has no cause (``None``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

CAUSES: tuple[str, ...] = ("data", "rng", "compute", "metrics", "environment", "none")

#: environment entries that may differ between runs of one check without meaning anything
VOLATILE: frozenset[str] = frozenset({"pid", "started", "hostname", "time", "run"})

#: signals recorded per step, and the cause their difference points to
SIGNAL_CAUSE: dict[str, str] = {
    "rng.python": "rng",
    "rng.numpy": "rng",
    "rng.torch": "rng",
    "rng.cuda": "rng",
    "batch": "data",
    "loss": "compute",
    "grads": "compute",
    "params": "compute",
}

EXPLANATION: dict[str, str] = {
    "data": "the batch the DataLoader yielded differs first: shuffling, sampling, augmentation "
            "or dataset order is not reproducible",
    "rng": "a global RNG stream is in a different state at the start of the step: something "
           "draws from it unseeded, or a different number of times",
    "compute": "same RNG states, batch and parameters going into the step, yet the loss, "
               "gradients or update differ: a nondeterministic computation",
    "metrics": "every step agrees, the final metrics do not: the evaluation is not reproducible",
    "environment": "the runs recorded different environments",
    "none": "every step and metric agree",
}


def environment_differences(
    environments: Sequence[Mapping[str, Any] | None],
) -> list[dict[str, Any]]:
    """Entries in which a run's environment differs from run 1's, ``{"key", "run", "reference",
    "value"}`` each; runs without a recorded environment are skipped."""
    if not environments or environments[0] is None:
        return []
    ref = environments[0]
    out: list[dict[str, Any]] = []
    for k, env in enumerate(environments[1:], 2):
        if env is None:
            continue
        for key in list(ref) + [key for key in env if key not in ref]:
            if key in VOLATILE:
                continue
            if ref.get(key) != env.get(key):
                out.append({"key": key, "run": k, "reference": ref.get(key), "value": env.get(key)})
    return out


def from_signal(signal: str | None, uses_dataloader: bool) -> str:
    """The cause a first divergent signal points to (the signals agree on everything before it)."""
    if signal is None:
        return "none"
    if signal.startswith("metric:"):
        return "metrics"
    if signal == "steps":
        return "data" if uses_dataloader else "compute"
    if signal.startswith("rng."):
        return "rng"
    return SIGNAL_CAUSE.get(signal, "compute")


def classify(
    *,
    reproducible: bool,
    failed: bool,
    divergent_signal: str | None,
    environments: Sequence[Mapping[str, Any] | None],
    uses_dataloader: bool,
) -> tuple[str | None, str]:
    """``(cause, why)`` for a check's outcome; see the module docstring for the rules."""
    if failed:
        return None, ""
    if reproducible:
        return "none", EXPLANATION["none"]
    diffs = environment_differences(environments)
    if diffs:
        shown = ", ".join(
            f"{d['key']}: {d['reference']!r} in run 1, {d['value']!r} in run {d['run']}"
            for d in diffs[:3]
        )
        more = f" (and {len(diffs) - 3} more)" if len(diffs) > 3 else ""
        return "environment", f"{EXPLANATION['environment']}: {shown}{more}"
    cause = from_signal(divergent_signal, uses_dataloader)
    why = EXPLANATION[cause]
    if divergent_signal == "steps":
        why = ("every recorded step agrees but one run made fewer steps: "
               + ("the DataLoader yielded fewer batches" if cause == "data"
                  else "the training loop ended on a condition that is not reproducible"))
    return cause, why
