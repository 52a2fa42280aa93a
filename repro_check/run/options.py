"""Every option of a run, in one frozen object: its default, its validation, what it means.

The command line, ``[tool.repro-check]``, the Python API and the pytest plugin all build a
:class:`RunOptions`; nothing below them takes loose run arguments. Fields a command can inherit
from a golden trace (``verify``) are ``None`` when not given; :meth:`RunOptions.inherit` fills
them in, and the properties (``seed_value``, ``components``, ...) give what a run actually uses.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from repro_check.child import seeding
from repro_check.compare import printed
from repro_check.compare.tolerances import ToleranceOptions
from repro_check.errors import UsageError
from repro_check.run import axes as across_axes

if TYPE_CHECKING:
    from repro_check.compare.steps import Policy
    from repro_check.distributed.launch import DistOptions

#: runs a check makes unless told otherwise; record makes one, verify always one
CHECK_RUNS = 2
RECORD_RUNS = 1
#: seed and thread count when none is given
DEFAULT_SEED = 0
DEFAULT_THREADS = 1
#: more intra-op threads than any machine has cores (torch takes a 32-bit count)
MAX_THREADS = 4096
#: bounds on the other counts: far beyond any use, low enough that nothing sized by them (a spec
#: per run, a progress bar, a wait) can exhaust memory or overflow before a run starts
MAX_RUNS = 1000
MAX_JOBS = MAX_RUNS
MAX_STEPS = 10**12
#: seconds: about 30 years, well inside what every wait with a timeout accepts
MAX_TIMEOUT = 1e9


@dataclass(frozen=True)
class RunOptions:
    """How to run a target: seeding, bounds, parallelism, comparison tolerances.

    ``seed``, ``threads``, ``args``, ``without`` and ``max_steps`` are ``None`` when not given,
    so that ``verify`` can take them from the golden; :attr:`seed_value` and
    :attr:`threads_value` apply the defaults.
    """

    target: str | None = None
    args: tuple[str, ...] | None = None
    seed: int | None = None
    no_seed: bool = False
    without: tuple[str, ...] | None = None
    runs: int = CHECK_RUNS
    max_steps: int | None = None
    timeout: float | None = None
    threads: int | None = None
    jobs: int | None = None
    fail_fast: bool = False
    trace_dir: str | None = None
    tolerances: ToleranceOptions = field(default_factory=ToleranceOptions)
    policy_override: Policy | None = None
    distributed: DistOptions | None = None
    warn_only: bool = False
    probe_step: int | None = None
    #: ``--across AXIS=A,B`` flags as written: run in each environment and compare them
    across: tuple[str, ...] | None = None
    #: a pin plan of ``diagnose`` (:mod:`repro_check.child.pin`): a JSON file the runs read
    pin_plan: str | None = None
    #: printed metrics to pick beside the default rule: (NAME, REGEX) pairs (``--metric``); a
    #: mapping NAME -> REGEX or ``"NAME=REGEX"`` strings are accepted too
    printed_metrics: tuple[tuple[str, str], ...] = ()
    #: ``resume --at K``: stop the interrupted run after its first save at or after step K
    resume_at: int | None = None
    #: ``resume --resume-args 'ARGS'``: appended to the target's arguments in the resumed run,
    #: ``{checkpoint}`` replaced by the copy's path (split as a shell would)
    resume_args: str | None = None
    #: ``resume --checkpoint PATH_OR_GLOB``: the checkpoint, when its save cannot be seen
    checkpoint: str | None = None

    def __post_init__(self) -> None:
        for name in ("args", "without", "across"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                if isinstance(value, str):
                    raise UsageError(f"{name} must be a list of strings, got {value!r}")
                object.__setattr__(self, name, tuple(value))
        object.__setattr__(self, "printed_metrics",
                           printed.rules_of(self.printed_metrics, "printed_metrics"))
        self.validate()

    # ---- validation --------------------------------------------------------------------------
    def validate(self) -> None:
        """Every bound as a one-line usage error, before anything runs."""
        _whole("--runs", self.runs, 1, MAX_RUNS)
        if self.max_steps is not None:
            _whole("--max-steps", self.max_steps, 1, MAX_STEPS)
        if self.probe_step is not None:
            _whole("probe step", self.probe_step, 1, MAX_STEPS)
        if self.timeout is not None:
            if isinstance(self.timeout, bool) or not isinstance(self.timeout, (int, float)) \
                    or not math.isfinite(self.timeout) or self.timeout <= 0:
                raise UsageError(f"--timeout must be a positive number of seconds, got "
                                 f"{self.timeout}")
            if self.timeout > MAX_TIMEOUT:
                raise UsageError(f"--timeout must be at most {MAX_TIMEOUT:g} seconds, got "
                                 f"{self.timeout:g}")
        if self.threads is not None:
            _whole("--threads", self.threads, 1, MAX_THREADS)
        if self.jobs is not None:
            _whole("--jobs", self.jobs, 1, MAX_JOBS)
        if self.seed is not None:
            if isinstance(self.seed, bool) or not isinstance(self.seed, int):
                raise UsageError(f"--seed must be a whole number, got {self.seed!r}")
            seeding.check_seed(self.seed)
            if self.no_seed:
                raise UsageError(f"--no-seed runs without any seed, but --seed {self.seed} was "
                                 "given too: keep one of them")
        if self.args is not None and not all(isinstance(a, str) for a in self.args):
            raise UsageError("the target's arguments must be strings")
        if self.args:
            check_command_line(self.args)
        seeding.select_components(self.without or ())  # unknown names: one clear line
        self.policy()  # a bad tolerance fails here
        if self.across:
            self._validate_across()
        if self.resume_at is not None or self.resume_args is not None:
            self._validate_resume()

    def _validate_resume(self) -> None:
        """``resume``: a step to stop at, arguments a shell could split, nothing that contradicts
        three runs under one seeding."""
        if self.resume_at is None:
            raise UsageError("resume needs --at K: the step from which the first checkpoint the "
                             "script writes is taken")
        _whole("--at", self.resume_at, 1, MAX_STEPS)
        if self.resume_args is not None:
            if not isinstance(self.resume_args, str):
                raise UsageError(f"--resume-args must be a string, got {self.resume_args!r}")
            self.resumed_args("CHECKPOINT")  # unbalanced quotes: one line
        if self.max_steps is not None and self.max_steps <= self.resume_at:
            raise UsageError(f"--max-steps {self.max_steps} leaves nothing to resume after "
                             f"--at {self.resume_at}")
        if self.no_seed:
            raise UsageError("resume compares runs under the same seeding: --no-seed leaves "
                             "every run seeded differently")
        if self.across:
            raise UsageError("--across does not combine with resume")
        if self.checkpoint is not None and (not isinstance(self.checkpoint, str)
                                            or not self.checkpoint.strip()):
            raise UsageError(f"--checkpoint must name a path or a glob, got {self.checkpoint!r}")

    def resumed_args(self, checkpoint: str) -> list[str]:
        """The resumed run's arguments: the target's, then ``--resume-args`` split as a shell
        would, ``{checkpoint}`` in them replaced by ``checkpoint``."""
        import shlex

        try:
            extra = shlex.split(self.resume_args or "")
        except ValueError as e:
            raise UsageError(f"--resume-args {self.resume_args!r} cannot be split into "
                             f"arguments: {e}") from None
        return self.target_args + [a.replace("{checkpoint}", checkpoint) for a in extra]

    def _validate_across(self) -> None:
        """The axes parse, and no other option contradicts what they hold equal or vary."""
        axes = self.axes
        kinds = {a.kind for a in axes}
        cells = math.prod(len(a.values) for a in axes)
        if cells * self.runs > MAX_RUNS:
            raise UsageError(f"--across makes {cells} environments of {self.runs} run(s) each: "
                             f"at most {MAX_RUNS} runs in all")
        off = set(self.without or ())
        for axis in axes:
            if axis.kind == "threads":
                for v in axis.values:
                    _whole("--across threads", int(v), 1, MAX_THREADS)
        if self.no_seed:
            raise UsageError("--across compares environments under the same seeding: "
                             "--no-seed leaves every run seeded differently")
        if "threads" in kinds and self.threads is not None:
            raise UsageError(f"--threads {self.threads} and --across threads=... both set the "
                             "thread count: keep one of them")
        if "threads" in kinds and "threads" in off:
            raise UsageError("--across threads=... sets the thread count, which --without "
                             "threads leaves unset: keep one of them")
        both = off & set(across_axes.DETERMINISTIC_COMPONENTS)
        if "deterministic" in kinds and both:
            raise UsageError(f"--across deterministic=on,off turns {', '.join(sorted(both))} on "
                             f"and off, which --without {','.join(sorted(both))} turns off: keep "
                             "one of them")
        if self.fail_fast:
            raise UsageError("--fail-fast stops at the first divergence, --across measures the "
                             "drift over every step: keep one of them")
        if self.distributed is not None:
            raise UsageError("--across does not combine with torchrun (--nproc-per-node)")

    @property
    def axes(self) -> tuple[across_axes.Axis, ...]:
        """The parsed ``--across`` axes (none without the flag)."""
        return across_axes.parse_axes(self.across or ())

    # ---- what a run uses ---------------------------------------------------------------------
    @property
    def seed_value(self) -> int:
        return DEFAULT_SEED if self.seed is None else self.seed

    @property
    def threads_value(self) -> int:
        return DEFAULT_THREADS if self.threads is None else self.threads

    @property
    def components(self) -> list[str]:
        return list(seeding.select_components(self.without or (), self.no_seed))

    @property
    def run_seed(self) -> int | None:
        """The seed the runs get, or None without seeding."""
        return self.seed_value if self.components else None

    @property
    def run_threads(self) -> int | None:
        """The fixed thread count, or None when the ``threads`` component is off."""
        return self.threads_value if "threads" in self.components else None

    @property
    def target_args(self) -> list[str]:
        return list(self.args or ())

    def policy(self) -> Policy:
        policy = self.policy_override if self.policy_override is not None \
            else self.tolerances.policy()
        asked = frozenset(f"printed:{name}" for name, _ in self.printed_metrics)
        return dataclasses.replace(policy, always_metrics=policy.always_metrics | asked) \
            if asked else policy

    def replace(self, **changes: Any) -> RunOptions:
        return dataclasses.replace(self, **changes)

    def unseeded(self, **changes: Any) -> RunOptions:
        """These options with every seeding component off, for runs repro-check builds itself
        (``diagnose``'s pair without seeding): the user's ``--seed`` is dropped with the seeding,
        so the user-facing ``--seed``/``--no-seed`` conflict cannot refuse an internal step."""
        return self.replace(seed=None, no_seed=True, without=(), **changes)

    def inherit(self, recorded: RecordedSettings) -> RunOptions:
        """These options with what was not given taken from a recorded run (a golden's header):
        seeding, threads, max steps and the target's arguments; never the target itself, nor a
        printed-metric rule (a regex from a file would decide what work runs on every output line).

        Seeding: ``--no-seed`` or ``--without`` choose the components; a seed given for a golden
        recorded without seeding turns full seeding on; otherwise the golden's components."""
        if self.no_seed or self.without:
            no_seed, without = self.no_seed, self.without
        elif self.seed is not None and not recorded.components:
            no_seed, without = False, ()
        else:
            no_seed = not recorded.components
            without = tuple(c for c in seeding.COMPONENTS if c not in recorded.components)
        seed = self.seed if self.seed is not None else recorded.seed
        return self.replace(
            target=self.target,  # never from the file: a file given to us decides nothing that runs
            args=self.args if self.args is not None else tuple(recorded.args),
            seed=None if no_seed else seed,
            no_seed=no_seed,
            without=without,
            threads=self.threads if self.threads is not None else recorded.threads,
            max_steps=self.max_steps if self.max_steps is not None else recorded.max_steps,
        )


@dataclass
class RecordedSettings:
    """How a recorded run was made (from a trace header): what ``verify`` repeats."""

    target: str | None
    args: list[str]
    seed: int | None
    components: list[str]
    threads: int | None
    max_steps: int | None


#: the longest single argument Linux execs (MAX_ARG_STRLEN, 32 pages of 4 KiB, with its NUL)
MAX_ARG_BYTES = 32 * 4096 - 1


def check_command_line(args: Sequence[str]) -> None:
    """The target's arguments must fit on a command line, as ``python script.py ARGS`` needs:
    no NUL byte, none longer than the kernel takes, all together within ``ARG_MAX`` beside the
    environment. (The runs get them in a file, so this is about what the target is promised,
    not about how they travel.)"""
    total = 0
    for i, arg in enumerate(args, 1):
        try:
            data = os.fsencode(arg)
        except UnicodeError:
            raise UsageError(f"argument {i} of the target, {arg[:60]!r}, cannot be written on a "
                             "command line (a character with no encoding)") from None
        if b"\0" in data:
            raise UsageError(f"argument {i} of the target holds a NUL character, which no command "
                             "line can hold")
        if len(data) > MAX_ARG_BYTES:
            raise UsageError(f"argument {i} of the target is {len(data)} bytes long: a command "
                             f"line argument may be at most {MAX_ARG_BYTES} bytes")
        total += len(data) + 1 + 8  # the string, its NUL and its pointer
    try:
        limit = os.sysconf("SC_ARG_MAX")
    except (AttributeError, ValueError, OSError):
        return
    if limit <= 0:
        return
    env = sum(len(os.fsencode(k)) + len(os.fsencode(v)) + 2 + 8 for k, v in os.environ.items())
    if total + env > limit:
        raise UsageError(f"the target's {len(args)} arguments take {total} bytes: with the "
                         f"environment ({env} bytes) more than a command line may hold here "
                         f"({limit} bytes)")


def _whole(flag: str, value: Any, minimum: int, maximum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{flag} must be a whole number, got {value!r}")
    if value < minimum:
        raise UsageError(f"{flag} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise UsageError(f"{flag} must be at most {maximum}, got {value}")


def options_of(target: str | None, args: Sequence[str] | None = None, **given: Any) -> RunOptions:
    """A :class:`RunOptions` from keyword arguments as the Python API takes them: ``None`` means
    not given, ``args`` and ``without`` may be any sequence."""
    fields = {f.name for f in dataclasses.fields(RunOptions)}
    unknown = sorted(set(given) - fields)
    if unknown:
        raise TypeError(f"unexpected option(s): {', '.join(unknown)}")
    if args is not None:
        given["args"] = args  # a sequence: RunOptions makes it a tuple
    return RunOptions(target=target, **{k: v for k, v in given.items() if v is not None})
