"""Every option of a run, in one frozen object: its default, its validation, what it means.

Each option a user can give is listed once, in :data:`OPTIONS`: its keyword (the Python API's and
the pytest plugin's), its command-line flag and its ``[tool.repro-check]`` key, with how each form
of its value is read. :func:`build_options` is the one way a front end (the command line with the
config, the API, the pytest plugin, ``diagnose``, ``--across``) makes a :class:`RunOptions` from
what it was given; nothing below them takes loose run arguments. Fields a command can inherit
from a golden trace (``verify``) are ``None`` when not given; :meth:`RunOptions.inherit` fills
them in, and the properties (``seed_value``, ``components``, ...) give what a run actually uses.

What repro-check's own commands set on their runs and no user does (``diagnose``'s warn-only
mode, probe step and pin plan, the API's policy object) is :class:`InternalSettings`, passed
beside the options to the run machinery, never part of them.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
import shlex
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from repro_check.trace import seeding
from repro_check.compare import printed
from repro_check.compare.tolerances import ToleranceOptions, parse_cli, parse_config, parse_signals
from repro_check.errors import UsageError
from repro_check.run import axes as across_axes
from repro_check.targets import Target
from repro_check.trace.protocol import RunConfig

if TYPE_CHECKING:
    from repro_check.compare.steps import Policy

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
    distributed: DistOptions | None = None
    #: ``--across AXIS=A,B`` flags as written: run in each environment and compare them
    across: tuple[str, ...] | None = None
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
    #: the negative control (``--no-control`` turns it off): once the runs agree, one more run
    #: with a 1-ulp change planted must be seen to differ, or the verdict is UNVERIFIED
    control: bool = True

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
        self._validate_resume_values()

    def _validate_resume_values(self) -> None:
        """The resume options' own values (``resume`` checks the rest before its runs,
        :meth:`validate_resume`; the other commands ignore them, e.g. a config's ``resume-at``)."""
        if self.resume_at is not None:
            _whole("--at", self.resume_at, 1, MAX_STEPS)
        if self.resume_args is not None:
            if not isinstance(self.resume_args, str):
                raise UsageError(f"--resume-args must be a string, got {self.resume_args!r}")
            self.resumed_args("CHECKPOINT")  # unbalanced quotes: one line
        if self.checkpoint is not None and (not isinstance(self.checkpoint, str)
                                            or not self.checkpoint.strip()):
            raise UsageError(f"--checkpoint must name a path or a glob, got {self.checkpoint!r}")

    def validate_resume(self) -> None:
        """``resume``: a step to stop at, nothing that contradicts three runs under one
        seeding."""
        if self.resume_at is None:
            raise UsageError("resume needs --at K (or resume-at in [tool.repro-check]): the step "
                             "from which the first checkpoint the script writes is taken")
        if self.max_steps is not None and self.max_steps <= self.resume_at:
            raise UsageError(f"--max-steps {self.max_steps} leaves nothing to resume after "
                             f"--at {self.resume_at}")
        if self.no_seed:
            raise UsageError("resume compares runs under the same seeding: --no-seed leaves "
                             "every run seeded differently")
        if self.across:
            raise UsageError("--across does not combine with resume")

    def resumed_args(self, checkpoint: str) -> list[str]:
        """The resumed run's arguments: the target's, then ``--resume-args`` split as a shell
        would, ``{checkpoint}`` in them replaced by ``checkpoint``."""
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
            raise UsageError("--across does not combine with torchrun (--nproc-per-node): "
                             "compare process counts with --across nproc=1,2")

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

    def told(self, run: int, target: Target,
             internal: InternalSettings | None = None) -> RunConfig:
        """What run number ``run`` of ``target`` (parsed from :attr:`target`) is told: the one
        object its process reads (:class:`~repro_check.trace.protocol.RunConfig`), with the
        settings of repro-check's own commands (``internal``) beside the user's options."""
        internal = internal or PLAIN
        return RunConfig(run=run, target=target, args=tuple(self.target_args),
                         seed=self.run_seed, components=tuple(self.components),
                         threads=self.run_threads, max_steps=self.max_steps,
                         warn_only=internal.warn_only, probe_step=internal.probe_step,
                         printed_metrics=self.printed_metrics, pin_plan=internal.pin_plan)

    def policy(self, override: Policy | None = None) -> Policy:
        """The comparison policy of these tolerances (``override``: a policy object given to the
        API instead), with every ``--metric`` rule's metric always compared."""
        policy = override if override is not None else self.tolerances.policy()
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


# ---- torchrun's options ---------------------------------------------------------------------------------

#: ranks one node may start: far beyond any machine, so no number given starts a process storm
MAX_NPROC = 1024


@dataclass
class DistOptions:
    """torchrun's node and rendezvous options, passed through to every run's launch."""

    nproc_per_node: int = 1
    nnodes: str = "1"
    node_rank: int | None = None
    rdzv_backend: str | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    rdzv_conf: str | None = None
    master_addr: str | None = None
    master_port: int | None = None

    @property
    def node_range(self) -> tuple[int, int]:
        lo, _, hi = self.nnodes.partition(":")
        return int(lo), int(hi or lo)

    @property
    def multi_node(self) -> bool:
        return self.node_range != (1, 1)

    @property
    def shared_rendezvous(self) -> bool:
        """True when the user chose the rendezvous: runs then go one at a time (they would meet
        at the same endpoint), and in step with the other nodes."""
        return self.multi_node or any(
            v is not None for v in (self.rdzv_backend, self.rdzv_endpoint, self.master_addr,
                                    self.master_port)
        )

    def validate(self) -> None:
        if self.nproc_per_node < 1:
            raise UsageError(f"--nproc-per-node must be at least 1, got {self.nproc_per_node}")
        if self.nproc_per_node > MAX_NPROC:
            raise UsageError(f"--nproc-per-node must be at most {MAX_NPROC}, got "
                             f"{self.nproc_per_node}")
        if not re.fullmatch(r"\d+(:\d+)?", self.nnodes):
            raise UsageError(f"--nnodes must be N or MIN:MAX, got {self.nnodes!r}")
        lo, hi = self.node_range
        if lo < 1 or hi < lo:
            raise UsageError(f"--nnodes must be N or MIN:MAX with 1 <= MIN <= MAX, got {self.nnodes!r}")
        if self.node_rank is not None and not 0 <= self.node_rank < hi:
            raise UsageError(f"--node-rank must be between 0 and {hi - 1}, got {self.node_rank}")
        if self.master_port is not None and not 1 <= self.master_port <= 65535:
            raise UsageError(f"--master-port must be between 1 and 65535, got {self.master_port}")
        for flag, value in (("--rdzv-backend", self.rdzv_backend),
                            ("--rdzv-endpoint", self.rdzv_endpoint), ("--rdzv-id", self.rdzv_id),
                            ("--rdzv-conf", self.rdzv_conf), ("--master-addr", self.master_addr)):
            if value is not None and (not value or any(c.isspace() for c in value)):
                raise UsageError(f"{flag} must be a non-empty word, got {value!r}")

    def torchrun_args(self, run: int) -> list[str]:
        """torchrun's options for run ``run``.

        Without a rendezvous of the user's, a standalone rendezvous binds a free port for each
        run, so runs may go in parallel. With one, each run gets its own rendezvous id
        (``ID-run-K``, the same on every node), so run K of one node meets run K of the others.
        """
        args = ["--nproc-per-node", str(self.nproc_per_node), "--max-restarts", "0",
                "--monitor-interval", "0.1"]
        if not self.shared_rendezvous:
            return ["--standalone", "--nnodes", "1", *args]
        args += ["--nnodes", self.nnodes, "--rdzv-id", f"{self.rdzv_id or 'repro-check'}-run-{run}"]
        for flag, value in self._given():
            if flag != "--rdzv-id":
                args += [flag, value]
        return args

    def _given(self) -> list[tuple[str, str]]:
        return [(flag, str(value)) for flag, value in (
            ("--node-rank", self.node_rank), ("--rdzv-backend", self.rdzv_backend),
            ("--rdzv-endpoint", self.rdzv_endpoint), ("--rdzv-id", self.rdzv_id),
            ("--rdzv-conf", self.rdzv_conf), ("--master-addr", self.master_addr),
            ("--master-port", self.master_port),
        ) if value is not None]

    def cli_args(self) -> list[str]:
        """The repro-check options that ask for this launch (for the replay command)."""
        out = ["--nproc-per-node", str(self.nproc_per_node)]
        if self.nnodes != "1":
            out += ["--nnodes", self.nnodes]
        for flag, value in self._given():
            out += [flag, value]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


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


@dataclass(frozen=True)
class InternalSettings:
    """What repro-check's own commands set on their runs and no user option does: ``diagnose``'s
    runs with deterministic algorithms in warn-only mode (``warn_only``), a probe of every op at
    one step (``probe_step``) and a pin plan (``pin_plan``, a JSON file the runs read, see
    :mod:`repro_check.child.seeding.pin`), and a :class:`Policy` object given to the Python API
    (``policy_override``, instead of the options' tolerances), and the checkout of another git
    revision the runs start from (``checkout``, ``bisect``'s). Passed beside the
    :class:`RunOptions` to the run machinery; the default is a plain run."""

    policy_override: Policy | None = None
    warn_only: bool = False
    probe_step: int | None = None
    pin_plan: str | None = None
    #: (repository root, checkout folder): the runs start from that temporary checkout of
    #: another revision (``bisect``; :func:`repro_check.run.revisions.relocate`)
    checkout: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        if self.probe_step is not None:
            _whole("probe step", self.probe_step, 1, MAX_STEPS)

    def replace(self, **changes: Any) -> InternalSettings:
        return dataclasses.replace(self, **changes)


#: a plain run: what every command but ``diagnose`` (and the API given ``policy=``) uses
PLAIN = InternalSettings()


def require_two_runs(runs: int) -> None:
    """A check compares runs: fewer than two is a usage error (one line), for 0 as for 1."""
    if runs < 2:
        raise UsageError(f"a check compares runs: --runs must be at least 2, got {runs} "
                         "(record makes one run; verify compares one run with a golden)")


# ---- each option once: keyword, flag, config key -------------------------------------------------
def positive_whole(text: str) -> int:
    """``--at K`` as the command line gives it: a whole number of at least 1 (argparse makes a
    bad one one line, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {text!r}")
    return value


# Readers of a [tool.repro-check] value: a ValueError's text (or a UsageError) becomes one line
# naming the file and the key (repro_check.config).
def whole_at_least(minimum: int) -> Callable[[Any], int]:
    def check(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise ValueError(f"expected a whole number >= {minimum}")
        return v
    return check


def _toml_float(v: Any, why: str) -> float:
    """A TOML number as a float (an integer too large for one is refused, not an overflow)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(why)
    try:
        return float(v)
    except OverflowError:
        raise ValueError(why) from None


def positive_number(v: Any) -> float:
    x = _toml_float(v, "expected a number > 0")
    if not x > 0 or math.isinf(x):
        raise ValueError("expected a number > 0")
    return x


def number_at_least_one(v: Any) -> float:
    x = _toml_float(v, "expected a number >= 1")
    if not x >= 1 or math.isinf(x):
        raise ValueError("expected a number >= 1")
    return x


def boolean(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError("expected true or false")
    return v


def text(v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ValueError("expected a non-empty string")
    return v


def text_list(v: Any) -> list[str]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ValueError("expected a list of strings")
    return list(v)


def seed_number(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= seeding.MAX_SEED:
        raise ValueError(f"expected a whole number from 0 to {seeding.MAX_SEED}")
    return v


def metric_rules(v: Any) -> tuple[tuple[str, str], ...]:
    """``metric = { NAME = "REGEX" }`` or ``["NAME=REGEX", ...]``: printed metrics to pick."""
    if not isinstance(v, (dict, list)):
        raise ValueError('expected a table of NAME = "REGEX" or a list of "NAME=REGEX" strings')
    return printed.rules_of(v, "")


def components_of(v: Any) -> list[str]:
    """Seeding components as a list or ``"a,b"`` (unknown names: one line with a suggestion)."""
    names = [c.strip() for c in v.split(",")] if isinstance(v, str) else text_list(v)
    seeding.select_components(names)
    return [n for n in names if n]


def components_list(text: str) -> list[str]:
    """``--without a,b`` as written on the command line."""
    return [c for c in text.split(",") if c.strip()]


def signal_names(v: Any) -> tuple[str, ...] | None:
    """``signals``: ``"loss,grads"`` or a list of names (``--signals``)."""
    if isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v):
        v = ",".join(v)
    if not isinstance(v, str):
        raise ValueError('expected signal names, as a list or "a,b"')
    return parse_signals(v)


def _tolerance_reader(kind: str) -> Callable[[Any], dict[str, float | int]]:
    """A number (the default) or a table of NAME = number: as the config and keywords give it."""
    return lambda v: parse_config(kind, v, kind)


def _tolerance_flags(kind: str) -> Callable[[Any], dict[str, float | int]]:
    """``--atol loss=1e-6`` (repeatable) as the command line gives it."""
    return lambda v: parse_cli(kind, v)


def _same(v: Any) -> Any:
    return v


@dataclass(frozen=True)
class OptionSpec:
    """One run option: every front end reads it from here.

    ``name`` is its keyword in the Python API and the pytest plugin and (unless ``part_of`` names
    another) its :class:`RunOptions` field; ``flag`` its command-line flag (None: not a flag of its
    own); ``key`` its ``[tool.repro-check]`` key (None: not in the config). ``from_flag``,
    ``from_config`` and ``from_keyword`` turn each form of the value into the one the builder
    merges."""

    name: str
    flag: str | None
    key: str | None
    help: str
    metavar: str | None = None
    #: argparse: ``"value"`` (``type`` applied), ``"switch"`` (store_true), ``"append"``
    action: str = "value"
    type: Callable[[str], Any] | None = None
    short: str | None = None
    from_flag: Callable[[Any], Any] = _same
    from_config: Callable[[Any], Any] = _same
    from_keyword: Callable[[Any], Any] = _same
    #: settable per target in ``targets``
    per_target: bool = False
    #: a keyword of ``assert_reproducible`` and ``@pytest.mark.reproducible``
    pytest: bool = True
    #: the RunOptions field it is a part of (``tolerances``), when not its own
    part_of: str | None = None

    @property
    def field(self) -> str:
        return self.part_of or self.name

    @property
    def dest(self) -> str:
        """The attribute argparse stores the flag in (``--max-steps``: ``max_steps``)."""
        return (self.flag or self.name).lstrip("-").replace("-", "_")


def _fspath(v: Any) -> str:
    return os.fspath(v)


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("args", None, "args", "the target's arguments (after -- on the command line)",
               from_config=text_list, per_target=True),
    OptionSpec("seed", "--seed", "seed", "seed for every component (default 0)", type=int,
               from_config=seed_number, per_target=True),
    OptionSpec("no_seed", "--no-seed", "no-seed", "no seeding at all (the unseeded protocol)",
               action="switch", from_config=boolean, per_target=True),
    OptionSpec("without", "--without", "without",
               "seeding components to turn off (e.g. numpy,cudnn)", metavar="A,B",
               type=components_list, from_config=components_of, per_target=True),
    OptionSpec("runs", "--runs", "runs", "number of runs (default 2)", metavar="N", type=int,
               from_config=whole_at_least(2), per_target=True),
    OptionSpec("max_steps", "--max-steps", "max-steps", "stop each run after N optimizer steps",
               metavar="N", type=int, from_config=whole_at_least(1), per_target=True),
    OptionSpec("timeout", "--timeout", "timeout", "seconds allowed per run", metavar="S",
               type=float, from_config=positive_number, per_target=True),
    OptionSpec("threads", "--threads", "threads",
               "torch intra-op threads in every run (default 1: thread count changes bits)",
               metavar="N", type=int, from_config=whole_at_least(1), per_target=True),
    OptionSpec("printed_metrics", "--metric", "metric",
               "also compare the number REGEX finds in the run's output (its first group, or the "
               "group named value) as metric printed:NAME; repeatable", metavar="NAME=REGEX",
               action="append", from_flag=lambda v: tuple(printed.parse_flag(t) for t in v),
               from_config=metric_rules,
               from_keyword=lambda v: printed.rules_of(v, "printed_metrics"), per_target=True),
    OptionSpec("jobs", "--jobs", "jobs", "runs at the same time (default: as many as the CPUs hold)",
               metavar="N", type=int, short="-j", from_config=whole_at_least(1)),
    OptionSpec("fail_fast", "--fail-fast", "fail-fast",
               "stop every run as soon as the first divergent step is known", action="switch",
               from_config=boolean),
    OptionSpec("control", "--no-control", "control",
               "skip the negative control: the run with a 1-ulp change planted after step 1 "
               "that must be seen to differ before an agreeing verdict stands",
               action="switch", from_flag=lambda on: not on, from_config=boolean,
               per_target=True),
    OptionSpec("trace_dir", "--trace-dir", "trace-dir",
               "where run traces are kept (default .repro-check/runs)", metavar="DIR",
               from_flag=os.path.abspath, from_config=text, from_keyword=_fspath),
    OptionSpec("atol", "--atol", "atol",
               "absolute tolerance, for all values or one signal/metric (loss=1e-6, "
               "metric:accuracy=1e-3); repeatable (default: exact bits)", metavar="[NAME=]X",
               action="append", from_flag=_tolerance_flags("atol"),
               from_config=_tolerance_reader("atol"), from_keyword=_tolerance_reader("atol"),
               part_of="tolerances"),
    OptionSpec("rtol", "--rtol", "rtol", "relative tolerance, as --atol", metavar="[NAME=]X",
               action="append", from_flag=_tolerance_flags("rtol"),
               from_config=_tolerance_reader("rtol"), from_keyword=_tolerance_reader("rtol"),
               part_of="tolerances"),
    OptionSpec("ulps", "--ulps", "ulps",
               "accept values at most N representable floats apart, as --atol",
               metavar="[NAME=]N", action="append", from_flag=_tolerance_flags("ulps"),
               from_config=_tolerance_reader("ulps"), from_keyword=_tolerance_reader("ulps"),
               part_of="tolerances"),
    OptionSpec("signals", "--signals", "signals",
               "compare only these per-step signals, e.g. loss (default: all of rng, batch, loss, "
               "grads, params); final metrics always count", metavar="A,B",
               from_flag=parse_signals, from_config=signal_names, from_keyword=signal_names,
               part_of="tolerances"),
    OptionSpec("band_widen", "--band-widen", "band-widen",
               "widen the golden's band of repeated runs by F about its centre", metavar="F",
               type=float, from_config=number_at_least_one, part_of="tolerances"),
    OptionSpec("band", "--no-band", "band",
               "ignore the band stored in the golden (judge by tolerances only)",
               action="switch", from_flag=lambda on: not on, from_config=boolean,
               part_of="tolerances"),
    OptionSpec("across", "--across", None,
               "run in each environment (--runs times, default once) and compare each with the "
               "first; axes: threads=1,2  device=cpu,cuda  python=PATH,PATH  deterministic=on,off"
               "  workers=0,2  start=fork,spawn  compile=off,on  compile-cache=cold,warm"
               "  rev=main,WORKTREE  'args=A|B'  nproc=1,2  env:NAME=a,b; "
               "repeat for a grid", metavar="AXIS=A,B", action="append",
               from_flag=tuple, pytest=False),
    #: ``repro-check resume`` (and repro_check.resume, assert_resumes): the other commands ignore
    #: them; the API's resume() takes them as ``at``, ``resume_args``, ``checkpoint``
    OptionSpec("resume_at", "--at", "resume-at",
               "stop the interrupted run after the first checkpoint it writes at or after step K",
               metavar="K", type=positive_whole, from_config=whole_at_least(1), per_target=True,
               pytest=False),
    OptionSpec("resume_args", "--resume-args", "resume-args",
               "arguments the resumed run gets after the target's; {checkpoint} is replaced by "
               "the path of the checkpoint's copy", metavar="'ARGS'", from_config=text,
               per_target=True, pytest=False),
    OptionSpec("checkpoint", "--checkpoint", "checkpoint",
               "the checkpoint file or folder (a path or a glob), when repro-check cannot see "
               "its save (a file that changed after a step is taken)", metavar="PATH_OR_GLOB",
               from_config=text, per_target=True, pytest=False),
    #: its flags are torchrun's (--nproc-per-node, --nnodes, ...): one group, one DistOptions
    OptionSpec("distributed", "--nproc-per-node", None,
               "launch every run with torchrun (turns distributed checking on)", pytest=False),
)
SPECS: dict[str, OptionSpec] = {s.name: s for s in OPTIONS}
#: the keywords of the pytest plugin: every option it can pass on (and ``golden`` for verify)
PYTEST_KEYWORDS: tuple[str, ...] = tuple(s.name for s in OPTIONS if s.pytest)
#: the keywords of the Python API: every option, and a whole ToleranceOptions as ``tolerances``
KEYWORDS: tuple[str, ...] = (*SPECS, "tolerances")
#: the [tool.repro-check] keys of the run options (and which a ``targets`` entry may set)
CONFIG_KEYS: dict[str, OptionSpec] = {s.key: s for s in OPTIONS if s.key is not None}
TARGET_KEYS: tuple[str, ...] = tuple(s.key for s in OPTIONS if s.key is not None and s.per_target)
#: the seeding pair: whichever source gives one of them decides both (a flag beats the config)
SEEDING = ("seed", "no_seed")


class ConfigSource(Protocol):
    """What the builder reads of :class:`repro_check.config.Config`."""

    tolerances: ToleranceOptions

    def get(self, key: str, entry: Any = None, default: Any = None) -> Any: ...


def keyword_values(given: Mapping[str, Any], *, allowed: Collection[str] = KEYWORDS) -> dict[str, Any]:
    """Keywords as the Python API and the pytest plugin take them, read (``None``: not given);
    an unknown one is a TypeError, as a function call's would be."""
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise TypeError(f"unexpected option(s): {', '.join(unknown)}")
    out: dict[str, Any] = {}
    for name, value in given.items():
        if value is None:
            continue
        out[name] = value if name == "tolerances" else SPECS[name].from_keyword(value)
    return out


def config_values(config: ConfigSource, entry: Any = None,
                  keys: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """What ``[tool.repro-check]`` sets (a target's entry over the table), by option name.
    ``keys`` renames or drops (None) an option's key for one command (record's ``record-runs``).
    Tolerances come whole, as ``tolerances``; within the config ``no-seed`` drops its ``seed``."""
    keys = keys or {}
    out: dict[str, Any] = {}
    for spec in OPTIONS:
        key = keys.get(spec.name, spec.key)
        if key is None or spec.part_of is not None:
            continue
        value = config.get(key, entry)
        if value is not None:
            out[spec.name] = str(value) if isinstance(value, os.PathLike) else value
    if out.get("no_seed"):
        out.pop("seed", None)
    out["tolerances"] = config.tolerances
    return out


def _tolerances_of(layer: Mapping[str, Any], lower: ToleranceOptions) -> ToleranceOptions:
    """``lower`` with what ``layer`` sets over it: a whole ``tolerances`` replaces it, each piece
    (``atol``, ``band``, ...) goes over its own part."""
    base = layer["tolerances"] if layer.get("tolerances") is not None else lower
    over = ToleranceOptions(
        dict(layer.get("atol") or {}), dict(layer.get("rtol") or {}), dict(layer.get("ulps") or {}),
        layer.get("band_widen"), layer.get("band"), layer.get("signals"))
    return base.merged(over)


def build_options(target: str | None = None, *, given: Mapping[str, Any] | None = None,
                  config: ConfigSource | None = None, entry: Any = None,
                  base: RunOptions | None = None, keys: Mapping[str, str | None] | None = None,
                  defaults: Mapping[str, Any] | None = None,
                  compare_runs: bool = False) -> RunOptions:
    """The one way a front end makes its :class:`RunOptions`.

    Sources, highest first: ``given`` (the command line's flags, read by
    :func:`repro_check.cli.parsers.flag_values`, or the API's or the pytest plugin's keywords,
    read by :func:`keyword_values`; None: not given), ``config`` (``[tool.repro-check]``, ``entry``'s own
    settings over the table's; ``keys`` as :func:`config_values`), ``base`` (a RunOptions the
    API was given), ``defaults`` (a command's own, e.g. record's one run), then RunOptions'.

    Each option takes the highest source that gives it, but for three: the seeding pair (``seed``,
    ``no_seed``) comes whole from the highest source that gives either (``--seed`` beats
    ``no-seed = true``), tolerances and printed metrics are merged name by name, the higher
    source's over the lower's. ``compare_runs``: the runs are compared with each other (a
    check), so fewer than two is refused in those words."""
    layers: list[Mapping[str, Any]] = [given or {}]
    if config is not None:
        layers.append(config_values(config, entry, keys))
    if base is not None:
        layers.append({f.name: getattr(base, f.name) for f in dataclasses.fields(base)})
    layers.append(defaults or {})
    out: dict[str, Any] = {}
    for layer in reversed(layers):  # lowest first: each higher source goes over it
        if any(layer.get(n) is not None for n in SEEDING):
            for n in SEEDING:
                out[n] = layer.get(n)
        if "printed_metrics" in layer:
            out["printed_metrics"] = printed.merge_rules(out.get("printed_metrics", ()),
                                                         layer["printed_metrics"] or ())
        out["tolerances"] = _tolerances_of(layer, out.get("tolerances", ToleranceOptions()))
        for name, value in layer.items():
            if name in SEEDING or name == "printed_metrics" or name == "tolerances" or \
                    value is None or (name in SPECS and SPECS[name].part_of is not None):
                continue
            out[name] = value
    if target is not None:
        out["target"] = target
    runs = out.get("runs")
    if compare_runs and isinstance(runs, int) and not isinstance(runs, bool):
        require_two_runs(runs)  # --runs 0 is "at least 2" too, not RunOptions' "at least 1"
    return RunOptions(**{k: v for k, v in out.items() if v is not None})


def options_of(target: str | None, args: Sequence[str] | None = None, **given: Any) -> RunOptions:
    """A :class:`RunOptions` from keyword arguments as the Python API takes them: ``None`` means
    not given, ``args`` and ``without`` may be any sequence."""
    return build_options(target, given=keyword_values({"args": args, **given}))
