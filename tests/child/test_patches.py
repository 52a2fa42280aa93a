"""The patch registry: every hook of a run goes through it, in the stated order, once, and comes
out again exactly; what it patched is listed.

The unit tests use a registry of their own on a stand-in module. The run test installs, in this
process, every feature a run installs (as ``repro_check.child.main`` does) on the process's
registry, and checks the composed chains, a second install, the listing and the undo against the
objects the registry says it replaced.
"""

from __future__ import annotations

import datetime
import json
import os
import random
import sys
import time
import types
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from repro_check import targets
from repro_check.trace.pins import PLAN_VAR
from repro_check.trace.protocol import ResumeSettings, RunConfig

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from repro_check.child.observe import (  # noqa: E402
    capture,
    metric_hooks,
    origin,
    watch,
)
from repro_check.child.seeding import clock, overrides, components as seeding  # noqa: E402
from repro_check.child import features, main, patches  # noqa: E402
from repro_check.child.process import processes  # noqa: E402


def module_with(func: Any) -> types.ModuleType:
    mod = types.ModuleType("standin")
    mod.func = func  # type: ignore[attr-defined]
    return mod


def tracing(calls: list[str], feature: str) -> Any:
    """A feature's wrapper maker that notes when its wrapper runs."""

    def make(inner: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append(feature)
            return inner(*args, **kwargs)

        return wrapper

    return make


# ---- the registry --------------------------------------------------------------------------------
def test_features_nest_in_the_stated_order_whatever_order_they_are_installed_in() -> None:
    calls: list[str] = []
    original = lambda: calls.append("original")  # noqa: E731
    mod = module_with(original)
    reg = patches.PatchRegistry()
    for feature in ("watch.seeding", "seeding.loaders", "pin.reseeding"):  # not in ORDER's order
        reg.wrap(feature, mod, "func", tracing(calls, feature))
    mod.func()
    # ORDER: seeding.loaders innermost, then pin.reseeding, then watch.seeding (outermost)
    assert calls == ["watch.seeding", "pin.reseeding", "seeding.loaders", "original"]
    assert [row.features for row in reg.listing()] == [
        ("seeding.loaders", "pin.reseeding", "watch.seeding")]
    with pytest.raises(ValueError, match="not in the patch order"):
        reg.wrap("nobody.knows", mod, "func", tracing(calls, "x"))


def test_installing_again_is_installing_once_and_undo_puts_the_original_back() -> None:
    calls: list[str] = []
    original = lambda: calls.append("original")  # noqa: E731
    mod = module_with(original)
    reg = patches.PatchRegistry()
    token = object()
    for _ in range(3):
        reg.wrap("capture.backward", mod, "func", tracing(calls, "capture"), token=token)
        reg.wrap("watch.seeding", mod, "func", tracing(calls, "watch"))
    mod.func()
    assert calls == ["capture", "watch", "original"]  # ORDER: watch.seeding, then capture
    assert reg.original(mod, "func") is original
    reg.release(token)  # one owner's features out, the others stay
    calls.clear()
    mod.func()
    assert calls == ["watch", "original"]
    reg.undo()
    assert mod.func is original and reg.listing() == []


def test_undo_deletes_what_a_class_only_inherited_and_restores_mapping_items() -> None:
    class Base:
        def step(self) -> str:
            return "base"

    class Child(Base):
        pass

    table: dict[Any, Any] = {"kept": 1}
    reg = patches.PatchRegistry()
    reg.wrap("env_hooks", Child, "step", lambda inner: lambda self: "hooked " + inner(self))
    reg.replace("clock", table, "new", 2, item=True, label="table[new]")
    reg.replace("clock", table, "kept", 3, item=True, label="table[kept]")
    assert Child().step() == "hooked base" and table == {"kept": 3, "new": 2}
    reg.undo()
    assert "step" not in vars(Child) and Child().step() == "base"
    assert table == {"kept": 1}


def test_a_type_of_compiled_code_is_patched_in_place_and_restored_exactly() -> None:
    """``datetime.timedelta`` refuses ``setattr``: its own namespace is written instead, the type
    kept (what compiled libraries check), and undo puts back the exact original and deletes
    what it only inherited."""
    td = datetime.timedelta
    with pytest.raises(TypeError):
        td.total_seconds = lambda self: 0.0  # type: ignore[method-assign]
    assert patches.is_sealed(td) and not patches.is_sealed(patches.PatchRegistry)
    original = vars(td)["total_seconds"]
    reg = patches.PatchRegistry()
    reg.wrap("clock", td, "total_seconds", lambda inner: lambda self: inner(self) + 1.0)
    reg.replace("clock", td, "__rc_added__", 7)
    assert td(seconds=2).total_seconds() == 3.0 and td.__rc_added__ == 7  # type: ignore[attr-defined]
    assert datetime.timedelta is td
    reg.undo()
    assert vars(td)["total_seconds"] is original and td(seconds=2).total_seconds() == 2.0
    assert "__rc_added__" not in vars(td) and not hasattr(td, "__rc_added__")


def test_a_type_that_cannot_be_patched_in_place_skips_the_clock_not_the_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Where an interpreter keeps a compiled type's namespace out of reach, ``datetime.now`` keeps
    the real clock (listed as skipped) and ``time.time`` is still moved."""
    def refuse(cls: type, name: str, value: Any) -> None:
        raise patches.SealedTypeError(f"{cls.__qualname__}'s namespace cannot be reached")

    reg = patches.PatchRegistry()
    monkeypatch.setattr(patches, "PATCHES", reg)
    monkeypatch.setattr(patches, "write_sealed", refuse)
    try:
        assert clock.install(2) == clock.SHIFT_NS
        assert time.time() - clock.real_time() > clock.SHIFT_NS / 2e9
        assert datetime.datetime.now().year < 2100 and "now" in vars(datetime.datetime)
        skipped = {r.target: r.skipped for r in reg.listing() if r.skipped}
        assert set(skipped) == {"datetime.datetime.now", "datetime.datetime.utcnow"}
        assert all("real clock kept" in why for why in skipped.values())
    finally:
        reg.undo()
        clock.offset = 0
    assert time.time is clock._real_time


def test_a_skipped_feature_is_listed_with_its_reason() -> None:
    reg = patches.PatchRegistry()
    reg.skip("processes.bootstrap", "multiprocessing.process.BaseProcess._bootstrap", "gone")
    reg.skip("rngstate.python", "random.Random", "another layout")
    texts = [row.text() for row in reg.listing()]
    assert "multiprocessing.process.BaseProcess._bootstrap: processes.bootstrap skipped (gone)" \
        in texts
    assert [row.as_dict()["skipped"] for row in reg.listing()] == ["gone", "another layout"]


def test_an_argument_is_changed_by_name_whether_given_by_position_or_by_keyword() -> None:
    """A DataLoader's arguments reach its wrappers by name (``inspect.signature``): a
    ``worker_init_fn`` given by position is seen and replaced as one given by keyword is; a call
    the signature does not take gets the original's own error; a signature without the
    parameter (another version) skips the feature, listed with why, and patches nothing."""
    class Loader:
        def __init__(self, dataset: Any, batch_size: int = 1, shuffle: bool = False,
                     worker_init_fn: Any = None) -> None:
            self.args = (dataset, batch_size, shuffle, worker_init_fn)

    reg = patches.PatchRegistry()
    seen: list[Any] = []

    def edit(arguments: dict[str, Any]) -> None:
        seen.append(arguments.get("worker_init_fn"))
        arguments["worker_init_fn"] = "watched"

    assert reg.wrap_arguments("seeding.loaders", Loader, "__init__", ["worker_init_fn"], edit)
    init = print  # the script's own worker_init_fn
    assert Loader("ds", 4, True, init).args == ("ds", 4, True, "watched")
    assert Loader("ds", worker_init_fn=init).args == ("ds", 1, False, "watched")
    assert Loader("ds").args == ("ds", 1, False, "watched")
    assert seen == [init, init, None]
    with pytest.raises(TypeError):
        Loader("ds", 4, True, init, "one argument too many")
    reg.undo()
    assert Loader("ds", 4, True, init).args == ("ds", 4, True, init)

    class Older:
        def __init__(self, dataset: Any, batch_size: int = 1) -> None:
            self.args = (dataset, batch_size)

    original = Older.__init__
    assert not reg.wrap_arguments("seeding.loaders", Older, "__init__", ["worker_init_fn"], edit)
    assert Older.__init__ is original
    rows = reg.listing()
    assert [(r.features, r.skipped) for r in rows] == [(("seeding.loaders",),
                                                        "no parameter worker_init_fn")]


def test_a_missing_private_internal_skips_its_feature_instead_of_failing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from multiprocessing.process import BaseProcess

    reg = patches.PatchRegistry()
    monkeypatch.setattr(patches, "PATCHES", reg)
    monkeypatch.delattr(BaseProcess, "_bootstrap")
    processes.arrive(1, {}, os.getpid())  # a spawned child's token: wraps _bootstrap if it can
    assert [(r.target, r.features) for r in reg.listing()] == [
        ("multiprocessing.process.BaseProcess._bootstrap", ("processes.bootstrap",))]
    assert reg.listing()[0].skipped and "not recorded" in reg.listing()[0].skipped


def test_the_order_names_every_feature_once() -> None:
    assert len(set(patches.ORDER)) == len(patches.ORDER)
    assert not set(patches.ORDER) & set(patches.GUARDED)


def test_the_features_are_installed_in_the_order_the_patch_order_gives() -> None:
    """Each feature stands at its first entry of ``patches.ORDER``, the seeding first (before the
    trace header, which says what it did); every entry is one feature's."""
    ordered = features.ordered(main.run_features())
    assert [f.name for f in ordered] == [
        "seeding", "overrides", "pin", "watch", "capture", "checkpoint", "saved", "origin", "clock",
        "main", "processes", "metric_hooks", "env_hooks", "control"]
    assert [f.name for f in ordered if f.before_header] == ["seeding"]
    claimed = [entry for f in ordered for entry in f.patches]
    assert len(claimed) == len(set(claimed))
    assert sorted(claimed) == sorted(patches.ORDER)


def test_features_are_installed_in_that_order_whatever_order_they_are_given_and_taken_out_in_reverse(
        ) -> None:
    calls: list[str] = []

    class Stub(features.Registered):
        def __init__(self, name: str, entries: tuple[str, ...]) -> None:
            self.name, self.patches = name, entries

        def install(self, context: features.RunContext) -> None:
            calls.append(self.name)

        def uninstall(self) -> None:
            calls.append(f"-{self.name}")

    context = features.RunContext(RunConfig(run=1, target=targets.parse("train.py")),
                                  lambda line: None, {}, {})
    first = Stub("first", ("pin.data",))
    first.before_header = True
    given = [Stub("late", ("control.forward",)), Stub("early", ("overrides.loaders",)),
             Stub("middle", ("watch.seeding", "clock")), first]
    installed = features.install(context, given, header=lambda context: calls.append("header"))
    assert calls == ["first", "header", "early", "middle", "late"]
    features.uninstall(installed)
    assert calls[5:] == ["-late", "-middle", "-early", "-first"]
    with pytest.raises(ValueError, match="not in the patch order"):
        features.position(Stub("unknown", ("nowhere",)))


# ---- a run's features, in this process ------------------------------------------------------------
def install_a_run(events: list[dict[str, Any]], tmp: Path) -> tuple[Any, list[Any]]:
    """Every feature a run installs, as ``repro_check.child.main`` installs them (through
    ``child/features.py``, in the order ``patches.ORDER`` gives), with the step probe, flagged
    ops, torchrun's recorder, diagnose's pins, recorded processes, a resume's saves, an
    ``--across`` environment and a moved clock."""
    plan = tmp / "plan.json"
    plan.write_text(json.dumps({"dir": str(tmp / "replay"), "pins": [{"kind": "data", "step": 1}]}))
    os.environ[PLAN_VAR] = str(plan)  # the pins read (and take out) their plan
    resume = ResumeSettings(role="interrupted", stop_at=3, copy_dir=str(tmp / "copy"),
                            checkpoint=str(tmp / "*.npy"))
    told = RunConfig(run=2, target=targets.parse("train.py"), seed=7, processes=str(tmp),
                     components=("python", "numpy", "torch", "dataloader",
                                 "deterministic_algorithms"), threads=None,
                     resume=resume, num_workers=0, start_method="spawn", compile=False,
                     distributed=str(tmp), probe_step=1, warn_only=True)
    context = features.RunContext(told, events.append)
    installed = features.install(  # the seeding, the header, every other feature
        context, main.run_features(),
        header=lambda context: context.header.update({"distributed": {"rank": 0}}))
    return context.recorder, installed


@pytest.fixture()
def run_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Module state of ours that a run's install sets, and the streams seeding sets, put back."""
    monkeypatch.setattr(clock, "offset", 0)
    monkeypatch.setattr(origin, "SITES", origin.ModelSites())
    monkeypatch.setattr(processes, "_STARTS", None)
    states = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    deterministic = (torch.are_deterministic_algorithms_enabled(),
                     torch.is_deterministic_algorithms_warn_only_enabled())
    inductor = os.environ.get("TORCHINDUCTOR_DETERMINISTIC")  # the seeding sets it
    monkeypatch.setenv("TORCHINDUCTOR_DETERMINISTIC", inductor or "")  # put back as it is now
    if inductor is None:
        monkeypatch.delenv("TORCHINDUCTOR_DETERMINISTIC")
    with warnings.catch_warnings():
        yield
    torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])
    patches.PATCHES.undo()
    overrides.remove()  # the start method it set
    active = capture.active()
    if active is not None:
        active.uninstall()
    random.setstate(states[0])
    np.random.set_state(states[1])
    torch.set_rng_state(states[2])


def snapshot(owners: list[Any]) -> dict[tuple[int, Any], tuple[Any, dict[Any, Any]]]:
    return {(id(o), 0): (o, dict(o) if isinstance(o, dict) else dict(vars(o))) for o in owners}


def test_a_run_patches_through_the_registry_once_and_undo_restores_every_original(
        run_state: None, tmp_path: Path) -> None:
    from torch.utils.data import DataLoader

    events: list[dict[str, Any]] = []
    patches.PATCHES.undo()
    earlier, _ = install_a_run(events, tmp_path)  # imports what a run imports; says what is patched
    first = patches.PATCHES.listing()
    owners = list({id(owner): owner for owner, _, _, _ in patches.PATCHES.targets()}.values())
    earlier.uninstall()  # its probe, armed for step 1, leaves its dispatch mode
    patches.PATCHES.undo()
    before = snapshot(owners)  # every object the registry patched, as it is with nothing patched

    recorder, _ = install_a_run(events, tmp_path)
    patched = set()
    for owner, name, _, original in patches.PATCHES.targets():  # what it replaced, exactly
        assert before[(id(owner), 0)][1].get(name, patches.MISSING) is original, name
        patched.add((id(owner), name))
    rows = {row.target: row.features for row in patches.PATCHES.listing()}
    assert patches.PATCHES.listing() == first
    # one wrapper a callable, the features in the stated order
    assert rows["torch.utils.data.dataloader.DataLoader.__init__"] == (
        "overrides.loaders", "seeding.loaders", "pin.loaders", "watch.loaders")
    assert rows["multiprocessing.set_start_method"] == ("overrides.start_method",)
    assert rows["os.environ[TORCHDYNAMO_DISABLE]"] == ("overrides.compile",)
    assert rows["torch.utils.data.dataloader.DataLoader.__iter__"] == (
        "pin.loaders", "capture.epochs")
    assert rows["torch.utils.data.dataloader._BaseDataLoaderIter.__next__"] == (
        "pin.data", "capture.batches")
    for name in ("torch.seed", "torch.manual_seed", "torch.random.seed",
                 "torch.random.manual_seed", "random.seed", "numpy.random.seed"):
        assert rows[name] == ("pin.reseeding", "watch.seeding"), name
    assert rows["os._exit"] == ("main.flush",)
    assert rows["torch.autograd.backward"] == ("capture.backward",)
    assert rows["torch.nn.modules.module.Module.__init__"] == ("origin.models",)
    assert rows["time.time"] == ("clock",) and rows["datetime.datetime.now"] == ("clock",)
    # no type is replaced: compiled libraries (pandas) check the ones they import
    assert not [r for r in rows if r in ("datetime.datetime", "datetime.date")]
    assert rows["multiprocessing.process.BaseProcess._bootstrap"] == ("processes.bootstrap",)
    assert rows["torch.as_tensor"] == ("probe.factories",)  # armed for step 1
    # --checkpoint's files are looked at through the recorder (before every step, with or
    # without torch.optim), not through an optimizer hook of their own
    assert rows["torch.optim.optimizer.register_optimizer_step_pre_hook"] == (
        "capture.step_hooks", "checkpoint.signals")
    assert rows["torch.save"] == ("checkpoint.saves", "saved.files")
    assert rows["numpy.save"] == ("saved.files",) and rows["pickle.dump"] == ("saved.files",)
    assert rows["torch.nn.modules.module.Module.__setstate__"] == ("saved.modules",)
    assert rows["torch.amp.grad_scaler.GradScaler.__init__"] == ("checkpoint.signals",)
    # their import finders (checkpoint.saves: Lightning's, HF's and DCP's saves once imported)
    assert rows["sys.meta_path"] == ("checkpoint.saves", "saved.files", "metric_hooks",
                                     "env_hooks")
    assert all(len(features) == len(set(features)) for features in rows.values())

    # installing the watch and the recorder's hooks again changes nothing
    watch.SeedingWatch(events.append, {}, 7).install()
    recorder.hooks.install(flag_ops=True)
    seeding.seed_dataloaders(7)
    overrides.install(RunConfig(run=1, target=targets.parse("train.py"), num_workers=0,
                                start_method="spawn", compile=False))
    assert patches.PATCHES.listing() == first
    # the installed wrappers work as one chain: seeded workers, a watched worker_init_fn
    loader = DataLoader(list(range(4)), 2, True, None, None, 0, None, False, False, 0, None,
                        None, None)  # ..., worker_init_fn, multiprocessing_context, generator
    assert loader.generator is None  # a resume's run: none of ours, which it could not save
    assert loader.num_workers == 0 and os.environ["TORCHDYNAMO_DISABLE"] == "1"
    assert isinstance(loader.worker_init_fn.keywords["user_fn"], watch.WorkerWatch)

    patches.PATCHES.undo()
    assert patches.PATCHES.listing() == [] and patches.PATCHES.targets() == []
    after = snapshot(owners)  # the same, but for what imports since added (torch's submodules)
    for key, (owner, was) in before.items():
        now = after[key][1]
        changed = sorted(str(name) for name in set(was) | set(now)
                         if was.get(name, patches.MISSING) is not now.get(name, patches.MISSING)
                         and (name in was or (id(owner), name) in patched))
        assert not changed, f"{owner!r}: {changed}"
    assert time.time is clock._real_time and datetime.datetime is clock.RealDatetime
    assert "now" in vars(datetime.datetime) and datetime.datetime.now().year < 2100  # the real one
    assert "TORCHDYNAMO_DISABLE" not in os.environ


def test_uninstalling_a_run_s_features_takes_out_all_they_put_in(run_state: None,
                                                                 tmp_path: Path) -> None:
    patches.PATCHES.undo()
    _, installed = install_a_run([], tmp_path)
    features.uninstall(installed)
    left = {f for row in patches.PATCHES.listing() if row.skipped is None for f in row.features}
    assert not left  # the seeding's own too


def test_debug_lists_what_a_run_patched(monkeypatch: pytest.MonkeyPatch) -> None:
    reg = patches.PatchRegistry()
    monkeypatch.setattr(patches, "PATCHES", reg)
    mod = module_with(lambda: None)
    reg.wrap("watch.seeding", mod, "func", tracing([], "watch"))
    reg.wrap("pin.reseeding", mod, "func", tracing([], "pin"))
    events: list[dict[str, Any]] = []
    monkeypatch.delenv(main.DEBUG_VAR, raising=False)
    assert main._debug_patches(events.append) == [] and events == []
    monkeypatch.setenv(main.DEBUG_VAR, "1")
    rows = main._debug_patches(events.append)
    assert events == [{"info": {"patches": [
        {"target": "standin.func", "features": ["pin.reseeding", "watch.seeding"]}]}}]
    assert main._debug_patches(events.append, rows) == rows and len(events) == 1  # unchanged
    assert patches.debug_lines(reg) == ["standin.func: pin.reseeding < watch.seeding"]


def test_two_import_hooks_on_one_module_both_apply(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The metric hooks and a resume's save hooks both wait for ``transformers.trainer``: each
    finder asks the finders after it for the module, so without a guard they asked each other
    forever (RecursionError: the script's import failed)."""
    (tmp_path / "hooked_twice.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[str] = []
    first = metric_hooks.PatchOnImport({"hooked_twice": lambda m: seen.append("metric")})
    second = metric_hooks.PatchOnImport({"hooked_twice": lambda m: seen.append("saves")},
                                        "checkpoint.saves")
    try:
        first.install()
        second.install()
        module = __import__("hooked_twice")
    finally:
        second.uninstall()
        first.uninstall()
        sys.modules.pop("hooked_twice", None)
    assert module.VALUE == 1 and sorted(seen) == ["metric", "saves"]
