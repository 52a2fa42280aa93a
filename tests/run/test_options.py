"""The one table of run options and the one builder: every option reaches a run the same way
from the command line, ``[tool.repro-check]``, the Python API and the pytest plugin, and what
repro-check's own commands set on their runs is not a user option.

All in-process: the API and the plugin are called with the run machinery replaced by a stub that
keeps the options it was given, so nothing runs; what each command checks before its runs (a
``verify``'s golden, a ``resume``'s options) is checked as for any call.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import repro_check
from repro_check import pytest_plugin
from repro_check.cli import parsers
from repro_check.cli.commands import DIAGNOSE_OWN
from repro_check.cli.plan import options_for
from repro_check.config import KEYS, TARGET_KEYS, load
from repro_check.distributed.launch import DistOptions
from repro_check.errors import TraceFileError, UsageError
from repro_check.run.options import (
    OPTIONS,
    PYTEST_KEYWORDS,
    SPECS,
    InternalSettings,
    RunOptions,
    build_options,
    keyword_values,
    options_of,
)

from ..synthetic_traces import write_trace

Check = Callable[[RunOptions], bool]

#: per option: (flags, TOML value, keyword value, what the options must then hold); None where
#: the table says the front end has no such form
SAMPLES: dict[str, tuple[list[str] | None, Any, Any, Check]] = {
    "args": (["--", "--lr", "1"], ["--lr", "1"], ["--lr", "1"],
             lambda o: o.args == ("--lr", "1")),
    "seed": (["--seed", "7"], 7, 7, lambda o: o.seed == 7 and o.run_seed == 7),
    "no_seed": (["--no-seed"], True, True, lambda o: o.no_seed and o.components == []),
    "without": (["--without", "numpy"], ["numpy"], ["numpy"],
                lambda o: o.without == ("numpy",) and "numpy" not in o.components),
    "runs": (["--runs", "3"], 3, 3, lambda o: o.runs == 3),
    "max_steps": (["--max-steps", "5"], 5, 5, lambda o: o.max_steps == 5),
    "timeout": (["--timeout", "2.5"], 2.5, 2.5, lambda o: o.timeout == 2.5),
    "threads": (["--threads", "2"], 2, 2, lambda o: o.threads == 2 and o.run_threads == 2),
    "printed_metrics": (["--metric", "acc=acc (\\d+)"], {"acc": "acc (\\d+)"},
                        {"acc": "acc (\\d+)"},
                        lambda o: o.printed_metrics == (("acc", "acc (\\d+)"),)),
    "jobs": (["--jobs", "3"], 3, 3, lambda o: o.jobs == 3),
    "fail_fast": (["--fail-fast"], True, True, lambda o: o.fail_fast is True),
    "control": (["--no-control"], False, False, lambda o: o.control is False),
    "trace_dir": (["--trace-dir", "traces"], "traces", "traces",
                  lambda o: o.trace_dir is not None and Path(o.trace_dir).name == "traces"),
    "atol": (["--atol", "loss=1e-6"], {"loss": 1e-6}, {"loss": 1e-6},
             lambda o: o.policy().for_name("loss").atol == 1e-6),
    "rtol": (["--rtol", "1e-4"], 1e-4, 1e-4, lambda o: o.policy().default.rtol == 1e-4),
    "ulps": (["--ulps", "metric:*=4"], {"metric:*": 4}, {"metric:*": 4},
             lambda o: o.policy().for_name("metric:acc").ulps == 4),
    "signals": (["--signals", "loss"], ["loss"], "loss",
                lambda o: o.policy().signals == frozenset({"loss"})),
    "band_widen": (["--band-widen", "1.5"], 1.5, 1.5, lambda o: o.policy().band_widen == 1.5),
    "band": (["--no-band"], False, False, lambda o: o.policy().use_band is False),
    "across": (["--across", "threads=1,2"], None, ["threads=1,2"],
               lambda o: o.across == ("threads=1,2",)),
    "distributed": (["--nproc-per-node", "2"], None, DistOptions(nproc_per_node=2),
                    lambda o: o.distributed is not None and o.distributed.nproc_per_node == 2),
    "resume_at": (["--at", "3"], 3, 3, lambda o: o.resume_at == 3),
    "resume_args": (["--resume-args", "--resume {checkpoint}"], "--resume {checkpoint}",
                    "--resume {checkpoint}", lambda o: o.resume_args == "--resume {checkpoint}"
                    and o.resumed_args("C") == ["--resume", "C"]),
    "checkpoint": (["--checkpoint", "out/*.pkl"], "out/*.pkl", "out/*.pkl",
                   lambda o: o.checkpoint == "out/*.pkl"),
}
#: the options only ``resume`` reads (the API's resume() takes ``resume_at`` as ``at``)
RESUME = ("resume_at", "resume_args", "checkpoint")
TARGET = "x:main"


def test_every_option_of_the_table_has_a_sample() -> None:
    # a new option gets a sample here, and so is tried through every front end below
    assert set(SAMPLES) == set(SPECS)
    for name, (flags, toml, keyword, _) in SAMPLES.items():
        spec = SPECS[name]
        assert (flags is not None) == (spec.flag is not None or name == "args"), name
        assert (toml is not None) == (spec.key is not None), name


def parser_with(flag: str) -> Any:
    """The first command's parser that has ``flag`` (every one takes TARGET first)."""
    for make in (parsers.build_parser, parsers.record_parser, parsers.verify_parser,
                 parsers.build_diagnose_parser, parsers.resume_parser):
        p = make()
        if any(flag in a.option_strings for a in p._actions):  # noqa: SLF001 - argparse's own
            return p
    raise AssertionError(f"no command that runs a target has {flag}")


def toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\") + '"'
    if isinstance(value, list):
        return "[" + ", ".join(toml(v) for v in value) + "]"
    assert isinstance(value, dict)
    return "{ " + ", ".join(f"{toml(k)} = {toml(v)}" for k, v in value.items()) + " }"


def project(tmp_path: Path, text: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(f"[tool.repro-check]\n{text}\n")
    return tmp_path


def empty_ns() -> Any:
    return parsers.build_parser().parse_args([TARGET])


@pytest.mark.parametrize("name", [n for n, s in SAMPLES.items() if s[0] is not None])
def test_every_flag_reaches_the_options(name: str) -> None:
    flags, _, _, check = SAMPLES[name]
    assert flags is not None
    own, target_args = parsers.split_argv(flags)
    ns = (parser_with(own[0]) if own else parsers.build_parser()).parse_args([TARGET, *own])
    opts = options_for(ns, load(start=Path("/nonexistent")), TARGET, None, target_args)
    assert check(opts), opts
    assert not check(RunOptions(TARGET)), "the sample must differ from the default"


@pytest.mark.parametrize("name", [n for n, s in SAMPLES.items() if s[1] is not None])
@pytest.mark.parametrize("where", ["table", "entry"])
def test_every_config_key_reaches_the_options(tmp_path: Path, name: str, where: str) -> None:
    spec = SPECS[name]
    assert spec.key is not None and spec.key in KEYS
    _, value, _, check = SAMPLES[name]
    if where == "entry":
        if spec.key not in TARGET_KEYS:
            pytest.skip("a setting of the whole table")
        text = f"targets = [{{ target = {toml(TARGET)}, {spec.key} = {toml(value)} }}]"
    else:
        text = f"{spec.key} = {toml(value)}"
    cfg = load(start=project(tmp_path, text))
    opts = options_for(empty_ns(), cfg, TARGET, cfg.entry(TARGET), None)
    assert check(opts), (text, opts)


class Kept:
    """Stands for the run machinery: keeps what it was given, runs nothing. ``golden_in``: a
    folder made the current one, holding the golden ``g.json`` as ``record`` writes it (the
    ``verify`` command checks it before the run)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, golden_in: Path | None = None) -> None:
        if golden_in is not None:
            monkeypatch.chdir(golden_in)
            write_trace(golden_in / "g.json", [1.0, 0.5], target=TARGET)
        self.calls: list[tuple[RunOptions, InternalSettings]] = []
        from repro_check.commands import across, record, verify
        from repro_check.commands import check as verdict
        from repro_check.commands import resume as resume_check

        monkeypatch.setattr(resume_check, "run_resume", self.keep)
        monkeypatch.setattr(verdict, "run_check", self.keep)
        monkeypatch.setattr(across, "run_across", self.keep)
        monkeypatch.setattr(record, "record_golden", self.keep)
        monkeypatch.setattr(verify, "verify_golden", self.keep)

    def keep(self, options: RunOptions, *args: Any, **kwargs: Any) -> str:
        internal = next((a for a in (*args, *kwargs.values()) if isinstance(a, InternalSettings)),
                        InternalSettings())
        self.calls.append((options, internal))
        return "kept"


@pytest.mark.parametrize("name", list(SAMPLES))
def test_every_keyword_reaches_the_options_through_the_api(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path, name: str) -> None:
    _, _, value, check = SAMPLES[name]
    kept = Kept(monkeypatch, tmp_path)
    assert repro_check.check(TARGET, **{name: value}) == "kept"
    assert repro_check.record(TARGET, "g.json", **{name: value}) == "kept"
    if name == "across":  # it reached the options: the golden's check refuses a threads axis
        with pytest.raises(TraceFileError, match="--across"):
            repro_check.verify(TARGET, "g.json", **{name: value})
    else:
        assert repro_check.verify(TARGET, "g.json", **{name: value}) == "kept"
    for opts, _ in kept.calls:
        assert check(opts), opts
    # over options given whole, a keyword wins
    kept.calls.clear()
    repro_check.check(options=RunOptions(TARGET), **{name: value})
    assert check(kept.calls[0][0])


@pytest.mark.parametrize("name", PYTEST_KEYWORDS)
def test_every_pytest_keyword_reaches_the_options(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path, name: str) -> None:
    _, _, value, check = SAMPLES[name]
    kept = Kept(monkeypatch, tmp_path)
    assert pytest_plugin.run_reproducibility(TARGET, **{name: value}) == "kept"
    assert check(kept.calls[0][0])
    pytest_plugin.run_reproducibility(TARGET, golden="g.json", **{name: value})
    assert check(kept.calls[1][0])


def test_the_pytest_keywords_are_the_tables() -> None:
    assert set(pytest_plugin.OPTIONS) == {s.name for s in OPTIONS if s.pytest} | {"golden"}
    # what a test cannot use: options that make another kind of run (resume's are
    # assert_resumes' keywords)
    assert {s.name for s in OPTIONS if not s.pytest} == {"across", "distributed", *RESUME}


@pytest.mark.parametrize("name", [n for n in SAMPLES if n not in ("runs", "across")])
def test_resume_builds_its_options_as_every_front_end_does(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str) -> None:
    """``repro_check.resume``, ``assert_resumes`` and ``repro-check resume`` (flags and config)
    take every option (``runs`` and ``--across`` excepted: a resume is three runs of its own)
    through the one builder."""
    flags, value_toml, value, check = SAMPLES[name]
    kept = Kept(monkeypatch)
    base = {"at": 2} if name != "resume_at" else {}
    keyword = "at" if name == "resume_at" else name
    if name == "no_seed":  # it reached the options: resume's own check refuses it, from each
        with pytest.raises(UsageError, match="--no-seed leaves every run seeded differently"):
            repro_check.resume(TARGET, **base, **{keyword: value})
        with pytest.raises(UsageError, match="--no-seed leaves every run seeded differently"):
            pytest_plugin.run_resume_check(TARGET, **{"at": 2, **{keyword: value}})
        assert not kept.calls  # before anything ran
    else:
        assert repro_check.resume(TARGET, **base, **{keyword: value}) == "kept"
        if name != "distributed":
            pytest_plugin.run_resume_check(TARGET, **{"at": 2, **{keyword: value}})
    for opts, _ in kept.calls:
        assert check(opts), opts
    if name != "resume_at":
        assert all(o.resume_at == 2 for o, _ in kept.calls)
    if flags is not None and name in RESUME:
        own, target_args = parsers.split_argv(flags)
        ns = parsers.resume_parser().parse_args([TARGET, *own])
        assert check(options_for(ns, load(start=Path("/nonexistent")), TARGET, None,
                                 target_args))
        spec = SPECS[name]
        cfg = load(start=project(tmp_path, f"{spec.key} = {toml(value_toml)}"))
        assert check(options_for(parsers.resume_parser().parse_args([TARGET]), cfg, TARGET,
                                 None, None))


def test_one_value_means_the_same_from_every_front_end(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A tolerance written as the config writes it, given to the API, the plugin and (as a flag)
    the command line, makes one policy."""
    kept = Kept(monkeypatch)
    repro_check.check(TARGET, atol={"loss": 1e-6, "default": 1e-9}, ulps=2)
    pytest_plugin.run_reproducibility(TARGET, atol={"loss": 1e-6, "default": 1e-9}, ulps=2)
    cfg = load(start=project(tmp_path, 'atol = { loss = 1e-6, default = 1e-9 }\nulps = 2'))
    from_config = options_for(empty_ns(), cfg, TARGET, None, None)
    ns = parsers.build_parser().parse_args([TARGET, "--atol", "loss=1e-6", "--atol", "1e-9",
                                            "--ulps", "2"])
    from_flags = options_for(ns, load(start=Path("/nonexistent")), TARGET, None, None)
    policies = [o.policy() for o, _ in kept.calls] + [from_config.policy(), from_flags.policy()]
    assert all(p == policies[0] for p in policies)
    assert policies[0].for_name("loss").atol == 1e-6 and policies[0].default.ulps == 2


# ---- precedence ---------------------------------------------------------------------------------
def test_flags_over_the_entry_over_the_table_over_the_defaults(tmp_path: Path) -> None:
    cfg = load(start=project(tmp_path, 'max-steps = 9\ntimeout = 30\nthreads = 3\n'
                                       'metric = { a = "a=(\\\\d+)", b = "b=(\\\\d+)" }\n'
                                       'atol = { loss = 1e-3 }\n'
                                       f'targets = [{{ target = "{TARGET}", max-steps = 5 }}]'))
    entry = cfg.entry(TARGET)
    ns = parsers.build_parser().parse_args([TARGET, "--threads", "2", "--metric", "b=B(\\d+)",
                                            "--atol", "grads=1e-2"])
    o = options_for(ns, cfg, TARGET, entry, None)
    assert o.threads == 2 and o.max_steps == 5 and o.timeout == 30 and o.seed is None
    # printed metrics and tolerances merge name by name, the flag's over the config's
    assert o.printed_metrics == (("a", "a=(\\d+)"), ("b", "B(\\d+)"))
    assert o.policy().for_name("loss").atol == 1e-3 and o.policy().for_name("grads").atol == 1e-2
    assert options_for(empty_ns(), cfg, TARGET, None, None).max_steps == 9


def test_the_seeding_pair_comes_whole_from_one_source(tmp_path: Path) -> None:
    cfg = load(start=project(tmp_path, "no-seed = true"))
    ns = parsers.build_parser().parse_args([TARGET, "--seed", "5"])
    o = options_for(ns, cfg, TARGET, None, None)  # --seed beats no-seed = true
    assert o.seed == 5 and not o.no_seed and o.run_seed == 5
    assert options_for(empty_ns(), cfg, TARGET, None, None).components == []
    # a keyword beats options given whole the same way
    assert build_options(given=keyword_values({"seed": 3}),
                         base=RunOptions(TARGET, no_seed=True)).run_seed == 3
    with pytest.raises(UsageError, match="--no-seed runs without any seed"):
        options_of(TARGET, seed=3, no_seed=True)  # one source giving both contradicts itself


def test_diagnose_takes_the_run_settings_of_the_config_but_not_its_own(tmp_path: Path) -> None:
    cfg = load(start=project(tmp_path, "seed = 4\nno-seed = true\nruns = 5\nfail-fast = true\n"
                                       "max-steps = 3"))
    ns = parsers.build_diagnose_parser().parse_args([TARGET])
    o = options_for(ns, cfg, TARGET, None, None, keys=DIAGNOSE_OWN)
    assert o.max_steps == 3 and o.runs == 2 and not o.fail_fast
    # no-seed is diagnose's own business: without it the table's seed is what the runs get
    assert not o.no_seed and o.seed == 4


# ---- what is not a user option --------------------------------------------------------------------
INTERNAL = ("policy_override", "warn_only", "probe_step", "pin_plan")


def test_internal_settings_are_not_run_options(monkeypatch: pytest.MonkeyPatch) -> None:
    public = {f.name for f in dataclasses.fields(RunOptions)}
    assert not public & set(INTERNAL)
    assert set(INTERNAL) <= {f.name for f in dataclasses.fields(InternalSettings)}
    for function in (repro_check.check, repro_check.record, repro_check.verify,
                     repro_check.across):
        assert not set(inspect.signature(function).parameters) & set(INTERNAL)
    Kept(monkeypatch)
    for name in INTERNAL:
        with pytest.raises(TypeError, match=name):
            repro_check.check(TARGET, **{name: 1})
        with pytest.raises(TypeError, match=name):
            pytest_plugin.run_reproducibility(TARGET, **{name: 1})
        with pytest.raises(TypeError, match=name):
            RunOptions(TARGET, **{name: 1})


def test_the_api_policy_object_travels_beside_the_options(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    from repro_check.compare.steps import Policy
    from repro_check.trace.values import Tolerance

    kept = Kept(monkeypatch, tmp_path)
    policy = Policy(Tolerance(0.5, 0.0))
    repro_check.check(TARGET, policy=policy)
    repro_check.verify(TARGET, "g.json", policy=policy)
    for opts, internal in kept.calls:
        assert internal.policy_override is policy and opts.policy(internal.policy_override) \
            .default.atol == 0.5
        assert opts.policy().default.atol == 0.0  # the options' own tolerances are untouched


def test_a_bad_probe_step_is_refused() -> None:
    with pytest.raises(UsageError, match="probe step"):
        InternalSettings(probe_step=0)
