"""The features a run installs into its process, each through one interface, in one order.

Every feature (the seeding, the step recorder, the seeding watch, diagnose's pins, the moved
clock, ...) is a :class:`Feature`: a ``name``, the entries of
:data:`repro_check.child.patches.ORDER` it wraps (``patches``), whether it goes before the trace
header (``before_header``), ``install(context)`` and ``uninstall()``. :func:`install` installs the
features it is given in the order ``patches.ORDER`` gives (a feature at its first entry there),
so the one list that says how the features' wrappers nest also says in which order they are put
in. The run entry (:mod:`repro_check.child.main`: ``run_features``) calls it once with every
feature of a run; a recorded process the target starts
(:mod:`repro_check.child.process.processes`) with the few it needs, in a context of its own.
The feature of those processes lives there, so that this interface never imports them.

The trace header says what the seeding did, so the seeding must be applied before it is written:
the features that say ``before_header`` (the seeding) are installed first, in that order among
themselves, then the header is written (the ``header`` callback :func:`install` is given, with
the context's :attr:`RunContext.done` filled in), then every other feature, in that order. The
wrappers still nest as ``patches.ORDER`` says, whatever order they were put in.

A feature installed before another it works with hands its part over through the
:class:`RunContext`: the pins and the seeding watch come before the step recorder (the pins
substitute batches the recorder then sees), so they leave what the recorder must call in
:attr:`RunContext.on_recorder`, and the recorder's feature calls it, in install order, as soon as
the recorder exists. The features after the recorder find it in :attr:`RunContext.recorder`.

Uninstalling a feature takes out what it installed (by default, every entry it names in the
registry); a run never uninstalls (its process ends), the tests do.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from repro_check.child import patches
from repro_check.child.seeding import clock, overrides
from repro_check.trace.protocol import RunConfig

if TYPE_CHECKING:
    from repro_check.child.observe.costs import Costs

#: how a feature writes a trace line
Emit = Callable[[dict[str, Any]], None]


@dataclass
class RunContext:
    """What the features of one run are installed with, and what they leave for each other and
    for the run entry (the recorder, the seeding watch, the checkpoint signals, the saves, the
    control's plant)."""

    config: RunConfig
    emit: Emit
    #: the trace header, written once the features before it are installed (a recorded process
    #: the target starts writes its own)
    header: dict[str, Any] = field(default_factory=dict)
    #: what the seeding did, component by component (the seeding's feature fills it in)
    done: dict[str, Any] = field(default_factory=dict)
    recorder: Any = None
    pins: Any = None
    watch: Any = None
    checkpoints: Any = None
    saves: Any = None
    plant: Any = None
    #: the capture's costs by part, kept when the run's environment asks (``observe.costs``)
    costs: Costs | None = None
    #: what features installed before the recorder call with it once it exists, in their order
    on_recorder: list[Callable[[Any], None]] = field(default_factory=list)

    @property
    def rank(self) -> int | None:
        """This process's rank under torchrun (None otherwise)."""
        if not self.config.distributed:
            return None
        rank: int | None = self.header.get("distributed", {}).get("rank")
        return rank


class Feature(Protocol):
    """One feature of a run: what it is called, the registry entries it wraps, how it is put
    in and taken out again."""

    @property
    def name(self) -> str: ...

    @property
    def patches(self) -> tuple[str, ...]:
        """Its entries of :data:`repro_check.child.patches.ORDER`."""
        ...

    @property
    def before_header(self) -> bool:
        """Whether it is installed before the trace header, which says what it did."""
        ...

    def install(self, context: RunContext) -> None: ...

    def uninstall(self) -> None: ...


class Registered:
    """What every feature shares: taking out again every entry it names in the registry."""

    name = ""
    patches: tuple[str, ...] = ()
    before_header = False
    #: what :meth:`install` put in, for :meth:`uninstall` (where it is an object of its own)
    installed: Any = None

    def uninstall(self) -> None:
        for entry in self.patches:
            patches.PATCHES.remove(entry)


class Seeding(Registered):
    """The run's seeding, component by component (a DataLoader gets a generator and seeded
    workers): before the trace header, which says what it did (:attr:`RunContext.done`)."""

    name = "seeding"
    patches = ("seeding.loaders",)
    before_header = True

    def install(self, context: RunContext) -> None:
        config = context.config
        if config.seed is None:
            context.done = {}
            return
        # loaded once the run is tied to its supervisor: the run's start before seeding does without it
        from repro_check.child.seeding import components

        # a resume's runs: no DataLoader gets a generator of ours, which the script could not
        # save (its workers are still seeded from their torch seed)
        context.done = components.apply(config.seed, list(config.components), config.threads,
                                        config.warn_only,
                                        loader_generators=config.resume is None)


class Overrides(Registered):
    """What an ``--across`` environment imposes: DataLoader workers, start method, compile off."""

    name = "overrides"
    patches = ("overrides.loaders", "overrides.start_method", "overrides.compile")

    def install(self, context: RunContext) -> None:
        if overrides.imposes(context.config):
            emit = context.emit
            overrides.install(context.config, lambda text: emit({"warning": text}))

    def uninstall(self) -> None:
        overrides.remove()
        super().uninstall()


class Pins(Registered):
    """The private generators' tracking, and diagnose's pins: before the recorder, which sees
    their batches."""

    name = "pin"
    patches = ("pin.loaders", "pin.data", "pin.reseeding", "pin.generators")

    def install(self, context: RunContext) -> None:
        # loaded once the run is tied to its supervisor: the run's start before seeding does without it
        from repro_check.child.seeding import pin

        context.pins = pin.from_environment(context.emit, context.rank)
        context.on_recorder.append(context.pins.attach)


class SeedingWatch(Registered):
    """The watch on the target's own seeding (and, for ``--across workers=/start=``, on the
    global streams DataLoader fetches draw from); it checks the settings after every step."""

    name = "watch"
    patches = ("watch.loaders", "watch.seeding", "watch.draws")

    def __init__(self) -> None:
        self.watch: Any = None

    def install(self, context: RunContext) -> None:
        # loaded once the run is tied to its supervisor: the run's start before seeding does without them
        from repro_check.child.observe import watch

        self.watch = context.watch = watch.SeedingWatch(context.emit, context.done,
                                                        context.config.seed).install()
        check = self.watch.check
        context.on_recorder.append(lambda recorder: recorder.watchers.append(check))
        if overrides.loading(context.config):  # which global streams the data loading draws from
            self.watch.watch_draws()

    def uninstall(self) -> None:
        if self.watch is not None:
            self.watch.uninstall()
        super().uninstall()


class Capture(Registered):
    """The step recorder (a rank's under torchrun), with its gradients without an optimizer and
    its step probe; what the features before it left for it is called once it exists."""

    name = "capture"
    patches = ("capture.step_hooks", "capture.backward", "gradients.autograd", "gradients.func",
               "gradients.no_grad", "capture.batches", "capture.optimizers", "capture.epochs",
               "capture.alerts", "rank.models", "probe.factories")

    def __init__(self) -> None:
        self.recorder: Any = None

    def install(self, context: RunContext) -> None:
        # loaded once the run is tied to its supervisor: the run's start before seeding does without it
        from repro_check.child.observe import capture

        config = context.config
        recorder_class: type[Any] = capture.Recorder
        if config.distributed:
            # only under torchrun
            from repro_check.child.process import rank

            recorder_class = rank.RankRecorder
        flag_ops = config.warn_only and "deterministic_algorithms" in config.components
        self.recorder = context.recorder = recorder_class(
            context.emit, config.max_steps, probe_step=config.probe_step,
            flag_ops=flag_ops).install()
        for hand_over in context.on_recorder:
            hand_over(self.recorder)

    def uninstall(self) -> None:
        if self.recorder is not None:
            self.recorder.uninstall()
        super().uninstall()


class Checkpoints(Registered):
    """The optimizer's ``lr``, ``opt`` and ``scaler`` signals; a resume's watch on saves."""

    name = "checkpoint"
    patches = ("checkpoint.signals", "checkpoint.saves")

    def install(self, context: RunContext) -> None:
        # loaded once the run is tied to its supervisor: the run's start before seeding does without it
        from repro_check.child.observe import checkpoint

        context.checkpoints = checkpoint.install(context.recorder, context.emit,
                                                 context.config.resume)
        self.installed = context.checkpoints

    def uninstall(self) -> None:
        self.installed.uninstall()
        super().uninstall()


class Saves(Registered):
    """Every save the run makes, and the modules' state at its end."""

    name = "saved"
    patches = ("saved.files", "saved.modules")

    def install(self, context: RunContext) -> None:
        # loaded once the run is tied to its supervisor: the run's start before seeding does without it
        from repro_check.child.observe import saved

        context.saves = saved.install(context.recorder, context.emit)
        self.installed = context.saves

    def uninstall(self) -> None:
        self.installed.uninstall()
        super().uninstall()


class Origins(Registered):
    """Where each model is built."""

    name = "origin"
    patches = ("origin.models",)

    def install(self, context: RunContext) -> None:
        # loaded once the run is tied to its supervisor: the run's start before seeding does without it
        from repro_check.child.observe import origin

        origin.SITES.install()

    def uninstall(self) -> None:
        # loaded once the run is tied to its supervisor: the run's start before seeding does without it
        from repro_check.child.observe import origin

        origin.SITES.uninstall()
        super().uninstall()


class Clock(Registered):
    """The run's moved wall clock: a seed taken from the clock differs in every run."""

    name = "clock"
    patches = ("clock",)

    def install(self, context: RunContext) -> None:
        clock.install(context.config.run)

    def uninstall(self) -> None:
        super().uninstall()
        clock.offset = 0


class Flush(Registered):
    """``os._exit`` skips every handler: the recorder's pending steps are handed over first
    (this process only)."""

    name = "main"
    patches = ("main.flush",)

    def install(self, context: RunContext) -> None:
        recorder = context.recorder
        owner = os.getpid()

        def make(real_exit: Any) -> Any:
            def _exit(code: int) -> None:
                if os.getpid() == owner:
                    try:
                        recorder.flush()
                    except BaseException:  # noqa: BLE001 - exiting anyway
                        pass
                real_exit(code)

            return _exit

        patches.PATCHES.wrap("main.flush", os, "_exit", make)


class MetricHooks(Registered):
    """What the target logs to TensorBoard, Lightning, the HF Trainer, wandb, mlflow."""

    name = "metric_hooks"
    patches = ("metric_hooks",)

    def install(self, context: RunContext) -> None:
        # loaded once the run is tied to its supervisor: the run's start before seeding does without it
        from repro_check.child.observe import metric_hooks

        self.installed = metric_hooks.install(context.recorder)

    def uninstall(self) -> None:
        self.installed.uninstall()
        super().uninstall()


class EnvHooks(Registered):
    """An RL environment's calls: the first ones, and the probe's."""

    name = "env_hooks"
    patches = ("env_hooks",)

    def install(self, context: RunContext) -> None:
        # loaded once the run is tied to its supervisor: the run's start before seeding does without it
        from repro_check.child.observe import env_hooks

        self.installed = env_hooks.install(context.recorder)

    def uninstall(self) -> None:
        self.installed.uninstall()
        super().uninstall()


class Control(Registered):
    """The negative control's run: a 1-ulp change planted on purpose; a resume's control
    leaves a restore out (any other run: nothing)."""

    name = "control"
    patches = ("control.forward", "control.leave_out")

    def install(self, context: RunContext) -> None:
        # loaded once the run is tied to its supervisor: the run's start before seeding does without it
        from repro_check.child.seeding import control

        config = context.config
        context.plant = control.install(context.recorder, context.emit, config.control)
        control.leave_out(config.resume.leave_out if config.resume is not None else None,
                          context.emit)


def position(feature: Feature, order: Sequence[str] = patches.ORDER) -> int:
    """Where ``feature`` stands in ``order``: at its first entry there (an entry not in the
    order is an error)."""
    unknown = [entry for entry in feature.patches if entry not in order]
    if unknown or not feature.patches:
        raise ValueError(f"feature {feature.name!r}: entries not in the patch order: {unknown}")
    return min(order.index(entry) for entry in feature.patches)


def ordered(given: Iterable[Feature], order: Sequence[str] = patches.ORDER) -> list[Feature]:
    """``given`` in the order ``order`` gives, those that go before the trace header first."""
    return sorted(given, key=lambda feature: (not feature.before_header,
                                              position(feature, order)))


def install(context: RunContext, given: Iterable[Feature],
            header: Callable[[RunContext], None] | None = None) -> list[Feature]:
    """Install the features ``given`` in the order :func:`ordered` gives, calling ``header``
    (which writes the trace header) once those that go before it are in; returns them in that
    order."""
    out = ordered(given)
    for feature in out:
        if header is not None and not feature.before_header:
            header(context)
            header = None
        feature.install(context)
    if header is not None:
        header(context)
    return out


def uninstall(installed: Sequence[Feature]) -> None:
    """Take the features out again, the last installed first."""
    for feature in reversed(installed):
        feature.uninstall()
