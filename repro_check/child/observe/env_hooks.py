"""The observations an RL environment returns, for the step probe: which ``reset()`` or ``step()``
call of the script returned what.

A gymnasium environment reset without a seed seeds itself from OS entropy, so its observations
differ between two runs though every op is deterministic. The probe traces such a difference to
the line that made the observation a tensor (``torch.as_tensor``); this names the environment
call that returned it, the place to seed.

``reset`` and ``step`` of ``gymnasium.Env`` (and of the older ``gym.Env``), of every subclass
(wrappers and environments, defined later too: ``__init_subclass__``) and of gymnasium's vector
environments are wrapped once the script imports the module that defines them (through
:class:`~repro_check.child.observe.metric_hooks.ImportHooks`; nothing here imports gymnasium). Only the
outermost call counts (``gym.make`` nests wrappers), at the innermost frame of the script's own
code (:func:`repro_check.child.observe.origin.is_library`). While the probe is armed each call is recorded
with a fingerprint of its observation (``{"k": "env"}``); otherwise only the last call is kept,
undigested, and recorded when the probe arms (the observation a step starts from was returned
in the step before). A hook never changes what the call does or returns.

Every run (a check's too) also sends its first :data:`RECORDED_CALLS` calls, and after them
the first call made at each new place (an evaluation environment's reset after training; up to
:data:`NEW_SITES` places), as
``{"info": {"env": {"n", "call", "loc", "obs", "action", "step"}}}``: the call's number, where
the script made it, digests of the observation it returned and of the action it was given
(``step`` calls), and the optimizer steps done by then. The parent compares them between the
runs (:func:`repro_check.compare.cause.env_call_differs`): the first call whose observation
differs for the same action is where the environment's own randomness entered, however many
calls before the first step it was made (an ``envs.reset()`` before the loop); a call given
another action while every observation before it agreed is where what chooses the actions
parted (an action space sampled without a seed).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from typing import Any

from repro_check.child.observe import origin
from repro_check.child import patches
from repro_check.child.observe.metric_hooks import ImportHooks

#: the methods wrapped on each environment class
METHODS: tuple[str, ...] = ("reset", "step")
#: the calls of a run sent for the check's comparison (the first ones: where entropy enters)
RECORDED_CALLS = 256
#: places in the code (a method called at a line) whose first call is sent after those
NEW_SITES = 64
#: module -> names of the environment base classes it defines
MODULES: dict[str, tuple[str, ...]] = {
    "gymnasium.core": ("Env",),
    "gymnasium.vector.vector_env": ("VectorEnv",),
    "gym.core": ("Env",),
}


def _location(frame: Any) -> dict[str, Any] | None:
    while frame is not None and origin.is_library(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return None
    return {"file": frame.f_code.co_filename, "line": frame.f_lineno,
            "function": frame.f_code.co_name}


def observation_fingerprint(obs: Any) -> str:
    """A numpy array or tensor observation as the probe fingerprints the tensor made from it
    (``torch.as_tensor(obs)``: equal digests mean the same bytes); anything else (a dict
    observation) by its content."""
    import torch

    # with torch, only when an environment's observation is fingerprinted
    from repro_check.child.observe.probe import arg_fingerprint
    from repro_check.trace import fingerprint

    if isinstance(obs, torch.Tensor) or (type(obs).__module__ == "numpy"
                                         and hasattr(obs, "dtype")):
        try:
            return arg_fingerprint(torch.as_tensor(obs))
        except Exception:  # noqa: BLE001 - an array torch cannot read: by content
            pass
    return str(fingerprint.nested(obs))


class EnvCalls(ImportHooks):
    """The hooks of one run; ``recorder.probe`` (a StepProbe or None) decides what is recorded."""

    failure = "environment calls of {name} are not named by a check or diagnose"
    feature = "env_hooks"

    def __init__(self, recorder: Any) -> None:
        super().__init__(recorder, MODULES)
        self._depth = threading.local()
        #: the last call made while the probe was not armed: (method, location, observation)
        self.pending: tuple[str, dict[str, Any] | None, Any] | None = None
        #: the outermost calls made so far
        self.calls = 0
        self._count = threading.Lock()
        #: the places calls were made at: (method, the caller's code, its line)
        self.sites: set[tuple[str, Any, int]] = set()
        #: calls sent after the first RECORDED_CALLS (the first at a new place)
        self.late = 0

    # ---- installing ----------------------------------------------------------------------
    def install(self) -> EnvCalls:
        probe = getattr(self.recorder, "probe", None)
        if probe is not None:
            probe.on_arm.append(self._flush_pending)
        super().install()
        return self

    def hook_module(self, name: str, what: Any, module: Any) -> None:
        for cls_name in what:
            self._hook_tree(getattr(module, cls_name))

    def _hook_tree(self, base: type) -> None:
        """Wrap ``base`` and its subclasses now, and every subclass defined from now on."""
        todo = [base]
        while todo:
            cls = todo.pop()
            self._wrap_class(cls)
            todo.extend(cls.__subclasses__())
        own = patches.PATCHES.original(base, "__init_subclass__")  # before ours, or MISSING
        own = None if own is patches.MISSING else own
        calls = self

        def init_subclass(cls: Any, **kwargs: Any) -> None:
            if own is not None:
                own.__func__(cls, **kwargs)
            else:
                # base is a class known only when this runs, which mypy cannot check
                super(base, cls).__init_subclass__(**kwargs)  # type: ignore[arg-type]
            calls._wrap_class(cls)

        patches.PATCHES.replace("env_hooks", base, "__init_subclass__",
                                classmethod(init_subclass), token=self)

    def _wrap_class(self, cls: type) -> None:
        for method in METHODS:
            original = cls.__dict__.get(method)
            if not callable(original) or getattr(original, "__repro_check_hook__", False):
                continue
            patches.PATCHES.wrap("env_hooks", cls, method,
                                 functools.partial(self._wrapped, method), token=self)

    def _wrapped(self, method: str, original: Any) -> Any:
        calls = self

        @functools.wraps(original)
        def hooked(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(calls._depth, "n", 0)
            calls._depth.n = depth + 1
            try:
                result = original(*args, **kwargs)
            finally:
                calls._depth.n = depth
            if depth == 0:
                try:
                    action = (args[1] if len(args) > 1 else kwargs.get("action")) \
                        if method == "step" else None
                    calls._returned(method, sys._getframe(1), result, action)
                except Exception:  # noqa: BLE001 - recording never breaks the environment
                    pass
            return result

        hooked.__repro_check_hook__ = True  # type: ignore[attr-defined]
        return hooked

    # ---- recording -----------------------------------------------------------------------
    def _returned(self, method: str, frame: Any, result: Any, action: Any = None) -> None:
        site = (method, frame.f_code, frame.f_lineno)  # cheap: the line is found only if sent
        with self._count:
            self.calls += 1
            n = self.calls
            new_site = site not in self.sites
            self.sites.add(site)  # places in the code: as many as the script has lines
            send = n <= RECORDED_CALLS or (new_site and self.late < NEW_SITES)
            if send and n > RECORDED_CALLS:
                self.late += 1
        probe = getattr(self.recorder, "probe", None)
        if not send and probe is None:
            return  # a check's run past its first calls, at a known place
        obs = result[0] if isinstance(result, tuple) and result else result
        where = _location(frame)
        if send:
            self._send(n, method, where, obs, action)
        if probe is None:
            return
        if probe.armed:
            self.pending = None
            self._record(probe, method, where, obs)
        else:
            self.pending = (method, where, obs)  # no digest: cheap outside the probed step

    def _flush_pending(self, probe: Any) -> None:
        pending, self.pending = self.pending, None
        if pending is not None:
            self._record(probe, *pending)

    def _send(self, n: int, method: str, where: dict[str, Any] | None, obs: Any,
              action: Any) -> None:
        """One of the run's first calls, for the check's comparison of the runs."""
        probe = getattr(self.recorder, "probe", None)
        quiet = probe.quiet() if probe is not None else contextlib.nullcontext()
        with quiet:  # the digests' own ops are not the step's
            body = {"n": n, "call": method, "loc": where, "obs": observation_fingerprint(obs),
                    "action": None if action is None else observation_fingerprint(action),
                    "step": int(getattr(self.recorder, "step", 0) or 0)}
        self.recorder.emit({"info": {"env": body}})

    def _record(self, probe: Any, method: str, where: dict[str, Any] | None, obs: Any) -> None:
        with probe.quiet():
            digest = observation_fingerprint(obs)
        probe.note({"k": "env", "call": method, "loc": where, "obs": digest})


def install(recorder: Any) -> EnvCalls:
    """Name, for ``recorder``'s step probe, the environment calls of the run from now on."""
    return EnvCalls(recorder).install()
