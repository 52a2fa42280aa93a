"""What a resume did not restore: the state that differs going into the resumed run's first
step, or at the first divergence, named from a fixed vocabulary with what to add to the
checkpoint.

The resumed run's step ``i`` is the reference's step ``C + i`` (``C``: the checkpoint's step).
Going in, the resumed run's weights (``params_in``, fingerprinted as ``params`` is) are compared
with the reference's ``params`` after step ``C``; its optimizer state (``opt``), learning rates
(``lr``), RNG streams (``rng.*``), mixed-precision scaler (``scaler``) and batch with the
reference's at step ``C + 1``. A batch that differs but equals one the reference had at an
earlier step ``j`` is a data order that restarted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dataclasses import dataclass

from repro_check.trace.payloads import GeneratorNote, GeneratorSeeded
from repro_check.trace.jsonfields import JsonRecord


@dataclass
class NotRestored(JsonRecord):
    """One piece of state a resume did not restore (``state`` from :data:`RESUME_STATES`), with
    what to add to the checkpoint (``fix``) and what was seen (``detail``)."""

    state: str
    fix: str
    detail: str = ""


#: what ``not_restored`` may name, in the order it is listed
RESUME_STATES = ("params", "optimizer", "lr", "rng.python", "rng.numpy", "rng.torch", "rng.cuda",
                 "generator", "data_order", "grad_scaler", "steps")

#: the signal of the weights going into the resumed run's first step (child.checkpoint.PARAMS_IN)
PARAMS_IN = "params_in"

#: signal -> the state it names
STATE_OF = {"lr": "lr", "opt": "optimizer", "scaler": "grad_scaler", "rng.python": "rng.python",
            "rng.numpy": "rng.numpy", "rng.torch": "rng.torch", "rng.cuda": "rng.cuda"}

#: one plain sentence each: what to add to the checkpoint (format fields: step, where, made,
#: left)
FIXES = {
    "params": "load the model's weights from the checkpoint (model.load_state_dict(...)) before "
              "training goes on.",
    "optimizer": "save optimizer.state_dict() in the checkpoint and call "
                 "optimizer.load_state_dict(...) on resume: its moments and step counts "
                 "restarted.",
    "lr": "save the LR scheduler's state_dict() in the checkpoint and load it on resume, so the "
          "schedule goes on from step {step} instead of restarting.",
    "rng.python": "save random.getstate() in the checkpoint and call random.setstate(...) on "
                  "resume.",
    "rng.numpy": "save np.random.get_state() in the checkpoint and call np.random.set_state(...) "
                 "on resume.",
    "rng.torch": "save torch.get_rng_state() in the checkpoint and call torch.set_rng_state(...) "
                 "on resume.",
    "rng.cuda": "save torch.cuda.get_rng_state_all() in the checkpoint and call "
                "torch.cuda.set_rng_state_all(...) on resume.",
    "generator": "save the private generator's state (g.get_state(); made at {where}) in the "
                 "checkpoint and call g.set_state(...) on resume.",
    "data_order": "save where the data order stands (the epoch, the batches of it already seen, "
                  "the sampler's seed or generator state) and on resume go on with that order, "
                  "skipping the batches already seen.",
    "grad_scaler": "save the GradScaler's state_dict() in the checkpoint and call "
                   "scaler.load_state_dict(...) on resume.",
    "steps": "save the step (or epoch) count in the checkpoint and resume the loop from it: the "
             "resumed run made {made} steps where the reference had {left} left.",
}



def _differs(a: Mapping[str, Any], b: Mapping[str, Any], name: str) -> bool:
    """Both sides recorded ``name`` and the values differ (a signal one side lacks says nothing:
    a stream nothing drew from is not recorded)."""
    return name in a and name in b and a[name] != b[name]


def _where(generators: Sequence[GeneratorNote]) -> str | None:
    """Where the script made its private generators (the resumed run's records), up to two."""
    out: list[str] = []
    for rec in generators:
        if isinstance(rec, GeneratorSeeded) and rec.created and rec.location is not None:
            text = rec.location.site
            if text not in out:
                out.append(text)
    return ", ".join(out[-2:]) or None


def attribute(ref: Mapping[int, Mapping[str, Any]], resumed: Mapping[int, Mapping[str, Any]],
              checkpoint_step: int, ref_steps: int, resumed_steps: int,
              divergent_step: int | None = None,
              generators: Sequence[GeneratorNote] = ()) -> list[NotRestored]:
    """The state not restored: what differs going into the first resumed step, else at the
    first divergent step (reference numbering); ``steps`` when the step counts differ."""
    c = checkpoint_step
    found: dict[str, NotRestored] = {}

    def add(state: str, detail: str) -> None:
        if state not in found:
            fix = FIXES[state].format(step=c, where=_where(generators) or "?",
                                      made=resumed_steps, left=ref_steps - c)
            found[state] = NotRestored(state, fix, detail)

    first = resumed.get(1)
    if first is not None:
        before = ref.get(c)
        if before is not None and "params" in before and PARAMS_IN in first \
                and before["params"] != first[PARAMS_IN]:
            add("params", f"the weights going into step {c + 1} are not the reference's after "
                          f"step {c}")
    for step in ([c + 1] if divergent_step is None or divergent_step == c + 1
                 else [c + 1, divergent_step]):
        other, own = resumed.get(step - c), ref.get(step)
        if other is None or own is None:
            continue
        for signal, state in STATE_OF.items():
            if _differs(own, other, signal):
                add(state, f"{signal} differs going into step {step}")
        if _differs(own, other, "batch"):
            earlier = [j for j in range(1, step) if ref.get(j, {}).get("batch") == other["batch"]]
            if earlier:
                add("data_order", f"the data order restarted: step {step} got step "
                                  f"{earlier[-1]}'s batch")
            else:
                add("data_order", f"the batch of step {step} differs from the reference's")
                rng_same = not any(_differs(own, other, s) for s in own if s.startswith("rng."))
                if rng_same and _where(generators):
                    add("generator", f"the batch differs while the global RNG streams agree: a "
                                     f"private generator (made at {_where(generators)}) restarted")
        if found:
            break
    if resumed_steps != ref_steps - c:
        # the counts themselves are the fix's to say (said once)
        add("steps", f"the step count was not restored after step {c}")
    return [found[s] for s in RESUME_STATES if s in found]
