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
    different number of times, before the batch or the loss could differ. Also any divergence of
    runs in which the target seeded a generator from the clock (the seeding watch saw a seed
    within a day of the current time): the clock is named, with the seeding call's file:line,
    whatever signal showed the difference first; a coarse field of the time (the hour, the date)
    counts when the seed differs between the runs and equals the same field in each. When the
    seed a stream got differs between the runs (OS entropy, ``random.randint`` of an unseeded
    stream), the seeding call is named too, with its line (``location``); so is such a call
    made during the divergent step itself (the stream agreed at its start, the loss differs:
    a mid-step reseed before a dropout) and one made in a DataLoader worker (the batch differs).
    Also a divergence at a step by which a generator the script made itself (``torch.Generator``,
    ``np.random.default_rng``, ``random.Random``), seeded differently in each run, had been drawn
    from: no global stream records it, and where the script made it is named.
    Also an RL environment (gymnasium) whose observation differs between the runs for the same
    action, in a call made before the divergent step (an ``envs.reset()`` without a seed before
    the loop, however many calls before the first step): the environment seeded itself from OS
    entropy, and that call is named, with its line (:func:`env_call_differs`).
``init``
    the first difference is the parameters going into step 1 (``init``), the RNG states
    agreeing: the model was initialised from a different random state in each run, typically
    built before the script seeds itself. Where the model was built is named when known.
``data``
    the first difference is the batch the DataLoader yielded (shuffling, sampling, augmentation in
    the data pipeline, dataset order). Also a run that ended its loop earlier while the steps
    before agreed, when the workload uses a DataLoader (the loader yielded fewer batches).
``compute``
    the RNG states, the batch and the parameters going into the step agree (the step before
    agreed on its parameters), and the step's loss, gradients or updated parameters differ: a
    nondeterministic computation. Also a shorter run without a DataLoader. Also a difference in
    the parameters going into step 1 (``init``), or in a step's computation, of a process whose
    model is in memory shared with other processes (``model.share_memory()``, Hogwild
    training): the processes update it at once, interleaved as the OS schedules them
    (:func:`shared_model`; ``location``: where the model was built).
``saved``
    every step agrees and a file the run saved does not (``saved:FILE:KEY``): what the run
    leaves behind, such as an EMA copy updated from a value that differs, is not reproducible.
``state``
    every step agrees and a tensor a module holds outside the optimizer differs at the end
    (``state:KEY``): buffers such as BatchNorm statistics, or a shadow copy of the parameters.
``metrics``
    every step agrees and a final metric does not: the evaluation is not reproducible.
``none``
    reproducible.

A check whose target failed or that was interrupted has no cause (``None``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from repro_check.compare.seeds import shared_field
from repro_check.trace.seeding import STREAM_NAMES
from repro_check.trace import signals
from repro_check.trace.payloads import (GENERATOR_KINDS, EnvCall, GeneratorDrawn, GeneratorNote,
                                        GeneratorSeeded, JsonValue, LoaderEpoch, LoaderMade,
                                        LoaderNote, Location, ModelBuilt, SeedOverride)

CAUSES: tuple[str, ...] = ("data", "rng", "init", "compute", "saved", "state", "metrics",
                           "environment", "none")

#: environment entries that may differ between runs of one check without meaning anything
VOLATILE: frozenset[str] = frozenset({"pid", "started", "hostname", "time", "run"})

#: signals recorded per step, and the cause their difference points to
#: what a divergence is put down to (a report's ``cause``)
Cause = Literal["rng", "init", "data", "compute", "saved", "state", "metrics", "environment",
                "none"]

SIGNAL_CAUSE: dict[str, Cause] = {
    "rng.python": "rng",
    "rng.numpy": "rng",
    "rng.torch": "rng",
    "rng.cuda": "rng",
    "init": "init",
    "batch": "data",
    "loss": "compute",
    "grads": "compute",
    "params": "compute",
    "updated": "compute",
}

EXPLANATION: dict[str, str] = {
    "data": "the batch the DataLoader yielded differs first: shuffling, sampling, augmentation "
            "or dataset order is not reproducible",
    "rng": "a global RNG stream is in a different state at the start of the step: something "
           "draws from it unseeded, or a different number of times",
    "init": "the parameters going into step 1 differ while the RNG states agree: the model was "
            "initialised from a different random state in each run (built before the script "
            "seeds itself, or from an unseeded generator)",
    "compute": "same RNG states, batch and parameters going into the step, yet the loss, "
               "gradients or update differ: a nondeterministic computation",
    "saved": "every step agrees, a file the run saved does not: what it leaves behind (an EMA "
             "or other copy of the weights, buffers, arrays) is not reproducible",
    "state": "every step agrees, a tensor a module holds outside the optimizer (a buffer such "
             "as BatchNorm statistics, an EMA or other shadow copy of the weights) differs at "
             "the end of the run",
    "metrics": "every step agrees, the final metrics do not: the evaluation is not reproducible",
    "environment": "the runs recorded different environments",
    "none": "every step and metric agree",
    "generator": "a random generator the script made itself is seeded differently in each run "
                 "(no seeding reaches it); seed it with a constant",
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


def from_signal(signal: str | None, uses_dataloader: bool) -> Cause:
    """The cause a first divergent signal points to (the signals agree on everything before it)."""
    if signal is None:
        return "none"
    if signal.startswith("metric:"):
        return "metrics"
    if signals.is_saved(signal):
        return "saved"
    if signals.is_state(signal):
        return "state"
    if signal == "steps":
        return "data" if uses_dataloader else "compute"
    if signal.startswith("rng."):
        return "rng"
    return SIGNAL_CAUSE.get(signal, "compute")


#: each run's seeding watch records, by run
Seedings = Mapping[int, Sequence[SeedOverride]]


def _seeds_by_key(seedings: Seedings) -> dict[str, tuple[SeedOverride, dict[int, JsonValue]]]:
    """Per seeding call (its key and call site): the first record seen, and each run's value.

    A call whose value differs between the runs and equals the same coarse field of the time in
    every run (the hour, the date: :func:`repro_check.compare.seeds.shared_field`) is given
    ``source: clock`` and ``clock_field``."""
    out: dict[str, tuple[SeedOverride, dict[int, JsonValue]]] = {}
    fields: dict[str, dict[int, list[str] | None]] = {}
    for run, records in sorted(seedings.items()):
        for rec in records:
            if rec.key is not None and rec.component in ("python", "numpy", "torch"):
                call = rec.call
                first, values = out.setdefault(call, (rec, {}))
                values.setdefault(run, rec.value)
                fields.setdefault(call, {}).setdefault(
                    run, list(rec.clock_fields) if rec.clock_fields is not None else None)
                if rec.source == "clock" and first.source != "clock":
                    out[call] = (rec, values)
    for call, (rec, values) in list(out.items()):
        if rec.source in (None, "clock") or str(rec.source).startswith("unseeded"):
            runs = sorted(values)
            field = shared_field([fields[call].get(r) for r in runs],
                                       [values[r] for r in runs])
            if field is not None and rec.source != "clock":
                out[call] = (dataclasses.replace(rec, source="clock", clock_field=field), values)
    return out


def _seed_text(rec: SeedOverride, values: dict[int, JsonValue]) -> str:
    shown = ", ".join(f"run {r}: {v}" for r, v in sorted(values.items())
                      if any(x is not None for x in values.values()))  # no value: entropy
    return f"{rec.key}{rec.at}; {shown}" if shown else f"{rec.key}{rec.at}"


def _differs(rec: SeedOverride, values: dict[int, JsonValue]) -> bool:
    """Whether a seeding call gave the runs different seeds (OS entropy always does)."""
    if len(values) < 2:
        return False
    return rec.source == "entropy" or len({repr(v) for v in values.values()}) > 1


@dataclass
class SeedingCall:
    """A seeding call that explains a divergence: the text, and where the call was made."""

    detail: str
    location: Location | None
    worker: bool = False
    #: the step in progress when the call was made (None: not recorded)
    step: int | None = None


def seeding_call(seedings: Seedings | None, clock_only: bool, stream: str | None = None,
                 step: int | None = None) -> SeedingCall | None:
    """Why the runs got different seeds, from the seeding watch's records (None: no such call).

    The clock first: a seed taken from it is named whatever showed the difference; otherwise
    (``clock_only`` false) a seeding call whose value differs between runs, one of ``stream``
    (the stream that differed first) if there is one; ``step``: only a call made by that step
    (a record without a step does not count then)."""
    if not seedings:
        return None
    calls = sorted(_seeds_by_key(seedings).values(),
                   key=lambda call: call[0].component != stream)
    if step is not None:
        calls = [c for c in calls if (c[0].at_step or step + 1) <= step]
    for rec, values in calls:
        if rec.source == "clock":
            name = STREAM_NAMES.get(rec.component, rec.component)
            field = f", the {rec.clock_field} of the time" if rec.clock_field else ""
            return SeedingCall(
                f"{name} is seeded from the clock ({_seed_text(rec, values)}{field}): "
                "every run gets another seed, so the runs cannot agree; seed it with a constant",
                rec.where, rec.in_worker, rec.at_step)
    if clock_only:
        return None
    for rec, values in calls:
        if _differs(rec, values):
            component, source = rec.component, str(rec.source)
            whence = "with a value that differs between runs"
            if source == "entropy":
                whence = "from OS entropy"
            elif source == f"unseeded {component}":
                whence = "with a value drawn from it while it was unseeded"
            elif source.startswith("unseeded "):
                whence = f"from {STREAM_NAMES.get(source[9:], source[9:])}, itself unseeded"
            inside = (f" in the DataLoader's workers (worker {rec.worker} first)"
                      if rec.in_worker else "")
            return SeedingCall(
                f"{STREAM_NAMES.get(component, component)} is seeded {whence}{inside} "
                f"({_seed_text(rec, values)}): the runs cannot agree; seed it with a constant",
                rec.where, rec.in_worker, rec.at_step)
    return None


def seeding_detail(seedings: Seedings | None, clock_only: bool,
                   stream: str | None = None) -> str | None:
    """The text of :func:`seeding_call` (None: no such call)."""
    found = seeding_call(seedings, clock_only, stream)
    return found.detail if found is not None else None


# ---- private generators ---------------------------------------------------------------------

#: generator records kept per run
MAX_GENERATOR_RECORDS = 2000


@dataclass
class GeneratorSource:
    """A private generator whose seeding differs between two runs and was drawn from."""

    key: str
    kind: str
    detail: str
    location: Location | None
    stack: list[Location]


def private_generator(a: Sequence[GeneratorNote], b: Sequence[GeneratorNote],
                      step: int, pinned: Collection[str] = ()) -> GeneratorSource | None:
    """The first generator the script made (run 1's records ``a``) whose seeding differs in the
    other run (``b``) and that was drawn from by the end of ``step``; ``pinned``: keys to skip."""
    seeds_b = {(r.key, r.event): r.fp for r in b if isinstance(r, GeneratorSeeded)}
    drawn = {r.key: r.drawn for r in [*a, *b] if isinstance(r, GeneratorDrawn)}
    created = {r.key: r for r in a if isinstance(r, GeneratorSeeded) and r.created}
    for rec in a:
        if not isinstance(rec, GeneratorSeeded):
            continue
        key = rec.key
        if key in pinned or drawn.get(key, step + 1) > step:
            continue
        if seeds_b.get((key, rec.event)) == rec.fp:
            continue
        first = created.get(key, rec)
        kind = GENERATOR_KINDS.get(rec.kind, "generator")
        how = {"entropy": "seeded from OS entropy (no seed given)",
               "clock": "seeded from the clock (a value within a day of the current time)",
               "manual_seed": "seeded with a value that differs between runs (the clock?)",
               "seed": "seeded with a value that differs between runs (the clock?)",
               "default": "seeded differently"}.get(rec.how, rec.how)
        loc = first.location
        seeded = rec.location
        where = f" at {seeded.site}" if seeded is not None and seeded != loc else ""
        made = loc.site if loc is not None else "an unknown place"
        first_draw = drawn.get(key)
        detail = (f"a {kind} made at {made}, {how}{where}; first drawn from at step "
                  f"{first_draw if first_draw else 'the start'}")
        return GeneratorSource(key, kind, detail, loc, list(first.stack))
    return None


def loader_at(records: Sequence[LoaderNote], step: int) -> LoaderMade | None:
    """The DataLoader that delivered ``step``'s batch: the one whose epoch started last at or
    before the step (None when the run noted none)."""
    made = {r.loader: r for r in records if isinstance(r, LoaderMade)}
    current = None
    for rec in records:
        if isinstance(rec, LoaderEpoch) and rec.iter <= step and rec.loader in made:
            current = made[rec.loader]
    return current


# ---- RL environments ----------------------------------------------------------------------

#: environment calls kept per run (the child sends its first 256, then the first at each new
#: place, up to 64)
MAX_ENV_RECORDS = 320


@dataclass
class EnvCallSource:
    """The first environment call whose observation differs between two runs."""

    detail: str
    location: Location | None
    #: ``reset`` or ``step``
    call: str = "reset"


def env_call_differs(a: Sequence[EnvCall], b: Sequence[EnvCall],
                     before_step: int | None) -> EnvCallSource | None:
    """The first call (run 1's records ``a``, the other run's ``b``, matched by number) that
    returned a different observation for the same action, or was given another action while
    every observation before it agreed, made before step ``before_step`` (None: any), while the
    training still agreed: the environment's own entropy, or an action chosen by something that
    is not reproducible (an action space sampled unseeded). None when the calls agree up to
    that step or up to the end of what was sent."""
    by_n = {r.n: r for r in b}
    for rec in sorted(a, key=lambda r: r.n):
        if before_step is not None and rec.step >= before_step:
            return None
        other = by_n.get(rec.n)
        if other is None or other.call != rec.call:
            return None  # the runs made other calls: no longer comparable
        loc = rec.location
        at = f" at {loc.site}" if loc is not None else ""
        when = (f"before step {rec.step + 1}" if rec.step == 0
                else f"after step {rec.step}")
        if other.action != rec.action:
            detail = (f"the action given to env.{rec.call}(){at} differs between the runs "
                      f"(the environment's call {rec.n}, {when}) while every observation "
                      "before it agreed: what chose it is not reproducible, such as an action "
                      "space sampled without a seed (seed it: env.action_space.seed(...); a "
                      "vector environment: envs.single_action_space.seed(...)), or a forward "
                      "pass that is not deterministic")
            return EnvCallSource(detail, loc, rec.call)
        if other.obs == rec.obs:
            continue
        given = " for the same action" if rec.call == "step" else ""
        detail = (f"the observation returned by env.{rec.call}(){at} differs between the "
                  f"runs{given} (the environment's call {rec.n}, {when}): the environment "
                  "seeds itself from OS entropy when reset() gets no seed; pass "
                  "env.reset(seed=...) (a vector environment: envs.reset(seed=...)) and seed "
                  "env.action_space (env.action_space.seed(...))")
        return EnvCallSource(detail, loc, rec.call)
    return None


def init_detail(models: Sequence[ModelBuilt] | None, seedings: Seedings | None) -> str:
    """The ``init`` explanation, with where the models were built and, when the script seeded
    torch after that, where it did."""
    why = EXPLANATION["init"]
    if not models:
        return why
    torch_seeds = [rec for rec in (seedings or {}).get(1, [])
                   if rec.component == "torch" and rec.order is not None]
    parts = []
    for model in models:
        where = model.where.site if model.where is not None else "an unknown place"
        text = f"{model.cls} built at {where}"
        later = [rec for rec in torch_seeds if model.order is not None
                 and rec.order is not None and rec.order > model.order]
        if later:
            text += f", before the script seeds torch ({later[0].key}{later[0].at})"
        parts.append(text)
    return f"{why}: {'; '.join(parts)}"


#: what :func:`classify` finds: the cause (None: none, the check failed), why, where
Classified = tuple[Cause | None, str, Location | None]


@dataclass(frozen=True)
class CheckOutcome:
    """What a check's outcome says about its cause (:func:`classify`'s arguments)."""

    reproducible: bool
    failed: bool
    divergent_signal: str | None
    environments: Sequence[Mapping[str, Any] | None]
    uses_dataloader: bool
    seedings: Seedings | None = None
    models: Sequence[ModelBuilt] | None = None
    generators: Mapping[int, Sequence[GeneratorNote]] | None = None
    divergence: tuple[int, int] | None = None
    loaders: Sequence[LoaderNote] | None = None
    env_calls: Mapping[int, Sequence[EnvCall]] | None = None
    #: the process the first divergence is in (None: the run's main process), its top-level
    #: models and how many of the parameters going into its step 1 were in shared memory
    process: int | None = None
    diverged_models: Sequence[ModelBuilt] | None = None
    shared_params: int = 0

    @property
    def signal_cause(self) -> Cause:
        """The cause the first divergent signal points to."""
        return from_signal(self.divergent_signal, self.uses_dataloader)

    @property
    def step(self) -> int | None:
        """The first divergent step (None: not known)."""
        return self.divergence[1] if self.divergence is not None else None


def _failed(outcome: CheckOutcome) -> Classified | None:
    """A target that failed, or an interrupted check: no cause."""
    return (None, "", None) if outcome.failed else None


def _agreed(outcome: CheckOutcome) -> Classified | None:
    return ("none", EXPLANATION["none"], None) if outcome.reproducible else None


def _environment(outcome: CheckOutcome) -> Classified | None:
    """Different environments explain any later difference: named before the signals."""
    diffs = environment_differences(outcome.environments)
    if not diffs:
        return None
    shown = ", ".join(
        f"{d['key']}: {d['reference']!r} in run 1, {d['value']!r} in run {d['run']}"
        for d in diffs[:3]
    )
    more = f" (and {len(diffs) - 3} more)" if len(diffs) > 3 else ""
    return "environment", f"{EXPLANATION['environment']}: {shown}{more}", None


def _clock_seed(outcome: CheckOutcome) -> Classified | None:
    """A generator seeded from the clock, whatever signal showed the difference first."""
    call = seeding_call(outcome.seedings, clock_only=True)
    return ("rng", call.detail, call.location) if call is not None else None


def _private_generator(outcome: CheckOutcome) -> Classified | None:
    """A generator the script made itself, seeded differently in each run and drawn from by
    the divergent step (no global stream records it)."""
    signal, divergence, generators = outcome.divergent_signal, outcome.divergence, \
        outcome.generators
    if not generators or divergence is None or signal is None or signal.startswith("rng."):
        return None
    run, step = divergence
    found = private_generator(generators.get(1, ()), generators.get(run, ()), step)
    if found is None:
        return None
    return "rng", f"{EXPLANATION['generator']}: {found.detail}", found.location


def _env_call(outcome: CheckOutcome) -> Classified | None:
    """An RL environment whose observation (or the action given it) differs before the
    divergent step: the environment's entropy, not the computation, data or evaluation."""
    if not outcome.env_calls or outcome.signal_cause not in ("compute", "data", "metrics"):
        return None
    run = outcome.divergence[0] if outcome.divergence is not None else 2
    env = env_call_differs(outcome.env_calls.get(1, ()), outcome.env_calls.get(run, ()),
                           outcome.step)
    return ("rng", env.detail, env.location) if env is not None else None


def _stream_seeded(outcome: CheckOutcome) -> Classified | None:
    """A global stream that differs first, and the seeding call that gave it a different seed
    in each run."""
    if outcome.signal_cause != "rng":
        return None
    signal = outcome.divergent_signal
    stream = signal.split(".", 1)[-1] if signal else None
    call = seeding_call(outcome.seedings, clock_only=False, stream=stream)
    return ("rng", call.detail, call.location) if call is not None else None


def _reseeded_in_step(outcome: CheckOutcome) -> Classified | None:
    """A global stream reseeded with a different seed in each run during the divergent step
    (its state at the start of the step agreed), or in a DataLoader worker, whose batch then
    differs: the reseed is the source, not the computation or the data."""
    cause, step = outcome.signal_cause, outcome.step
    if cause not in ("compute", "data") or step is None or outcome.divergent_signal == "steps":
        return None
    call = seeding_call(outcome.seedings, clock_only=False, step=step)
    if call is None or not (call.worker if cause == "data" else call.step == step):
        return None
    detail = call.detail
    if call.worker and outcome.loaders:
        loader = loader_at(outcome.loaders, step)
        made = loader.location if loader is not None else None
        if made is not None:
            detail += f"; the batches come from the DataLoader made at {made.site}"
    return "rng", detail, call.location


def shared_model(outcome: CheckOutcome) -> Classified | None:
    """A difference in the parameters going into step 1 or in a step's computation, in a
    process whose model is in shared memory: not the model's initialisation, nor a kernel, but
    other processes updating the same parameters at the same time (Hogwild), in the order the
    OS schedules them, which no seed fixes."""
    if outcome.signal_cause not in ("init", "compute") or outcome.divergent_signal == "steps":
        return None
    if outcome.shared_params <= 0:
        return None
    shared = [m for m in outcome.diverged_models or () if m.shared]
    where = shared[0].where if shared else None
    what = f"{outcome.shared_params} parameter tensor{'s' * (outcome.shared_params != 1)}"
    if shared:
        model = shared[0]
        what += f" of {model.name or model.cls} ({model.cls}" + (
            f", built at {where.site})" if where is not None else ")")
    process = f"process {outcome.process}" if outcome.process is not None else "the run"
    why = (f"the parameters {process} trains are in memory shared with other processes "
           f"({what}, model.share_memory()): processes that update them at the same time "
           "(Hogwild training) interleave their updates in the order the OS schedules them, "
           "which no seed fixes; train in one process, or combine the processes' gradients in "
           "a fixed order (torch.distributed)")
    return "compute", why, where


#: the rules that name a cause before the first divergent signal's own, in order: the first
#: that finds one wins (the module docstring says why each comes where it does)
CAUSE_RULES: tuple[Callable[[CheckOutcome], Classified | None], ...] = (
    _failed, _agreed, _environment, _clock_seed, _private_generator, _env_call, _stream_seeded,
    _reseeded_in_step, shared_model)


def signal_explained(outcome: CheckOutcome) -> Classified:
    """The cause the first divergent signal points to, explained: where the models were built
    (``init``), a shorter run, the DataLoader the batches come from (``data``)."""
    cause = outcome.signal_cause
    why = init_detail(outcome.models, outcome.seedings) if cause == "init" else EXPLANATION[cause]
    if outcome.divergent_signal == "steps":
        why = ("every recorded step agrees but one run made fewer steps: "
               + ("the DataLoader yielded fewer batches" if cause == "data"
                  else "the training loop ended on a condition that is not reproducible"))
    where = None
    if cause == "data" and outcome.loaders and outcome.step is not None:
        loader = loader_at(outcome.loaders, outcome.step)
        where = loader.location if loader is not None else None
        if loader is not None and where is not None:
            workers = f", {loader.workers} workers" if loader.workers else ""
            why += (f"; the batches come from the DataLoader made at {where.site} "
                    f"(dataset {loader.dataset}{workers})")
    return cause, why, where


def classify(
    *,
    reproducible: bool,
    failed: bool,
    divergent_signal: str | None,
    environments: Sequence[Mapping[str, Any] | None],
    uses_dataloader: bool,
    seedings: Seedings | None = None,
    models: Sequence[ModelBuilt] | None = None,
    generators: Mapping[int, Sequence[GeneratorNote]] | None = None,
    divergence: tuple[int, int] | None = None,
    loaders: Sequence[LoaderNote] | None = None,
    env_calls: Mapping[int, Sequence[EnvCall]] | None = None,
    process: int | None = None,
    diverged_models: Sequence[ModelBuilt] | None = None,
    shared_params: int = 0,
) -> Classified:
    """``(cause, why, location)`` for a check's outcome; see the module docstring for the rules
    (:data:`CAUSE_RULES`, then :func:`signal_explained`).

    ``seedings``: each run's seeding-watch records (``component``, ``key``, ``value``,
    ``where``, ``source``, ``order``); ``models``: run 1's top-level models (``class``,
    ``where``, ``order``), for the ``init`` explanation; ``generators``: each run's private
    generator records, and ``divergence`` the ``(run, step)`` of the first divergence, for a
    generator the script made (``location``: where it was made); ``loaders``: run 1's
    DataLoader records, for a ``data`` cause (``location``: where the loader was made);
    ``env_calls``: each run's first RL environment calls (``location``: the call whose
    observation differs first); ``process``: the process the first divergence is in (None:
    the main one), ``diverged_models`` its top-level models and ``shared_params`` how many of
    the parameters going into its step 1 were in shared memory."""
    outcome = CheckOutcome(
        reproducible=reproducible, failed=failed, divergent_signal=divergent_signal,
        environments=environments, uses_dataloader=uses_dataloader, seedings=seedings,
        models=models, generators=generators, divergence=divergence, loaders=loaders,
        env_calls=env_calls, process=process, diverged_models=diverged_models,
        shared_params=shared_params)
    for rule in CAUSE_RULES:
        found = rule(outcome)
        if found is not None:
            return found
    return signal_explained(outcome)
