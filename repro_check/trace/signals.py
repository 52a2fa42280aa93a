"""The names of what a step records and of what a comparison can find different.

One vocabulary for the child that writes a step's signals, the comparison that names the first
to differ (``divergent_signal`` in the JSON report), ``--signals`` and ``--tolerance``, and the
sentences the reports say. A divergent signal is a :data:`StepSignal`, a :data:`RunSignal`
(something about the runs, not one step's value), ``metric:NAME`` for a final metric,
``saved:FILE:KEY`` for a tensor of a file the run saved (``saved:ema.pt:0.weight``; ``saved:FILE``
for a save one run made and another did not) or ``state:KEY`` for a tensor a module held at the
end of the run outside its optimizer (``state:model.bn.running_mean``). A trace
written by another version of repro-check may carry a step signal this one does not know: it is
compared like the others and named as it is.
"""

from __future__ import annotations

from typing import Literal, get_args

#: what one step records, in the order it comes about in the step: the RNG states going in, the
#: parameters going in (``init`` at step 1; ``params_in`` in a resume's runs), the batch, the
#: loss, the gradients, the learning rates and the optimizer state (and a GradScaler's scale)
#: as the optimizer step starts, the parameters after it; in a step without an optimizer, the
#: tensors it trains after the script's own update (``updated``)
StepSignal = Literal["rng.python", "rng.numpy", "rng.torch", "rng.cuda", "init", "params_in",
                     "batch", "loss", "grads", "lr", "opt", "scaler", "params", "updated"]
STEP_SIGNALS: tuple[str, ...] = get_args(StepSignal)

#: what only a comparison finds: a run that recorded fewer steps, ranks of one run whose
#: parameters parted
RunSignal = Literal["steps", "rank_desync"]
RUN_SIGNALS: tuple[str, ...] = get_args(RunSignal)

#: a final metric's signal is this prefix and its name
METRIC_PREFIX = "metric:"

#: ``rng`` names every ``rng.*`` stream at once (``--signals rng``, ``--tolerance rng=...``)
RNG = "rng"

#: a divergent signal: a StepSignal, a RunSignal, ``metric:NAME``, or a step signal of a trace
#: written by another version (see the module's docstring)
Signal = str


#: a tensor of a saved file: this prefix, the file, and its key path (:func:`saved`)
SAVED_PREFIX = "saved:"
#: a tensor of the modules' state at the end of the run: this prefix and its key path
STATE_PREFIX = "state:"


def saved(file: str, key: str | None = None) -> Signal:
    """The signal of tensor ``key`` of saved file ``file`` (the whole save without a key)."""
    return f"{SAVED_PREFIX}{file}" + (f":{key}" if key else "")


def state(key: str) -> Signal:
    """The signal of tensor ``key`` of the modules' state at the end (``model.bn.running_var``)."""
    return f"{STATE_PREFIX}{key}"


def is_saved(signal: str | None) -> bool:
    return bool(signal) and str(signal).startswith(SAVED_PREFIX)


def is_state(signal: str | None) -> bool:
    return bool(signal) and str(signal).startswith(STATE_PREFIX)


def metric(name: str) -> Signal:
    """The signal of final metric ``name``."""
    return f"{METRIC_PREFIX}{name}"


def is_metric(signal: str | None) -> bool:
    return bool(signal) and str(signal).startswith(METRIC_PREFIX)


def is_rng(signal: str | None) -> bool:
    return bool(signal) and str(signal).startswith(f"{RNG}.")
