"""Root-cause rules: which first difference points to which cause."""

from __future__ import annotations

from typing import Any

import pytest

from repro_check.compare import cause
from repro_check.trace.payloads import (EnvCall, GeneratorNote, GeneratorSeeded, LoaderMade,
                                        ModelBuilt, SeedOverride, env_call, generator_note,
                                        loader_note)
from repro_check.trace.results import Location


def seeded(by_run: dict[int, list[dict[str, Any]]]) -> dict[int, list[SeedOverride]]:
    """Each run's seeding watch records as the trace reader types them."""
    return {run: [r for r in map(SeedOverride.parse, recs) if r is not None]
            for run, recs in by_run.items()}


def classify(signal: str | None, reproducible: bool = False, envs: Any = None,
             dataloader: bool = True, failed: bool = False) -> str | None:
    env = {"torch": "2.14", "threads": 1}
    return cause.classify(reproducible=reproducible, failed=failed, divergent_signal=signal,
                          environments=envs or [env, dict(env)], uses_dataloader=dataloader)[0]


@pytest.mark.parametrize("signal, expected", [
    ("rng.python", "rng"), ("rng.numpy", "rng"), ("rng.torch", "rng"), ("rng.cuda", "rng"),
    ("batch", "data"), ("loss", "compute"), ("grads", "compute"), ("params", "compute"),
    ("metric:accuracy", "metrics"),
])
def test_first_signal_gives_the_cause(signal: str, expected: str) -> None:
    assert classify(signal) == expected


def test_reproducible_failed_and_shorter_runs() -> None:
    assert classify(None, reproducible=True) == "none"
    assert classify("loss", failed=True) is None
    assert classify("steps", dataloader=True) == "data"
    assert classify("steps", dataloader=False) == "compute"


def test_a_different_environment_comes_first() -> None:
    a = {"torch": "2.14", "threads": 1, "started": 1.0}
    b = {"torch": "2.13", "threads": 1, "started": 2.0}
    got, why, _ = cause.classify(reproducible=False, failed=False, divergent_signal="loss",
                              environments=[a, b], uses_dataloader=True)
    assert got == "environment" and "torch: '2.14' in run 1, '2.13' in run 2" in why
    assert cause.environment_differences([a, {**a, "started": 9.0}]) == []
    assert classify("loss", envs=[a, {**a, "started": 9.0}]) == "compute"


def test_init_is_its_own_cause_with_where_the_model_was_built() -> None:
    assert classify("init") == "init"
    models = [{"class": "Net", "where": "train.py:20", "order": 3}]
    seeds = {1: [{"component": "torch", "key": "torch.manual_seed", "value": 42,
                  "where": "train.py:31", "order": 5}]}
    got, why, _ = cause.classify(reproducible=False, failed=False, divergent_signal="init",
                              environments=[{}, {}], uses_dataloader=True,
                              seedings=seeded(seeds),
                              models=[m for m in map(ModelBuilt.parse, models) if m is not None])
    assert got == "init" and "Net built at train.py:20" in why
    assert "before the script seeds torch (torch.manual_seed at train.py:31)" in why
    assert "init" in cause.CAUSES and "init" in cause.EXPLANATION


@pytest.mark.parametrize("signal", ["init", "loss", "params"])
def test_parameters_in_shared_memory_explain_a_step_that_differs(signal: str) -> None:
    """Hogwild training: the parameters going into a process's step differ because another
    process updated them meanwhile, not because of its initialisation or a kernel."""
    net = ModelBuilt.parse({"class": "Net", "name": "model", "where": "main.py:80",
                            "shared": True})
    assert net is not None and net.shared

    def run(signal: str, shared: int, models: list[ModelBuilt],
            process: int | None = 2) -> tuple[Any, str, Any]:
        return cause.classify(reproducible=False, failed=False, divergent_signal=signal,
                              environments=[{}, {}], uses_dataloader=True, process=process,
                              diverged_models=models, shared_params=shared)

    got, why, where = run(signal, 4, [net])
    assert got == "compute" and where is not None and where.site == "main.py:80"
    assert why.startswith("the parameters process 2 trains are in memory shared with other "
                          "processes (4 parameter tensors of model (Net, built at main.py:80), "
                          "model.share_memory())")
    assert "which no seed fixes" in why
    # handed to a spawned process, a model has no site there: the count says it all
    got, why, where = run(signal, 1, [], process=None)
    assert got == "compute" and where is None
    assert "the parameters the run trains are in memory shared with other processes (1 " \
           "parameter tensor, model.share_memory())" in why
    # nothing shared: the signal's own cause; a different batch or RNG state comes first
    assert run(signal, 0, [])[0] == ("init" if signal == "init" else "compute")
    assert "shared" not in run(signal, 0, [])[1]
    assert run("batch", 4, [net])[0] == "data" and run("rng.torch", 4, [net])[0] == "rng"


def seed_records(source: str | None, values: tuple[Any, ...] = (1, 2),
                 component: str = "torch") -> dict[int, list[dict[str, Any]]]:
    key = {"torch": "torch.manual_seed", "python": "random.seed"}[component]
    return {run: [{"component": component, "key": key, "value": v, "where": "t.py:9",
                   "source": source}] for run, v in enumerate(values, 1)}


@pytest.mark.parametrize("signal", ["rng.torch", "batch", "loss", "init", "metric:acc"])
def test_a_seed_from_the_clock_is_named_whatever_showed_first(signal: str) -> None:
    got, why, _ = cause.classify(reproducible=False, failed=False, divergent_signal=signal,
                              environments=[{}, {}], uses_dataloader=True,
                              seedings=seeded(seed_records("clock")))
    assert got == "rng" and "seeded from the clock (torch.manual_seed at t.py:9" in why
    assert "run 1: 1, run 2: 2" in why


def test_a_seed_that_differs_between_runs_is_named_on_an_rng_divergence() -> None:
    seeds = {**seed_records("unseeded python", component="python")}
    for run, recs in seed_records("unseeded python", (3, 4)).items():
        seeds[run] = seeds[run] + recs
    _, why, _ = cause.classify(reproducible=False, failed=False, divergent_signal="rng.torch",
                            environments=[{}, {}], uses_dataloader=True, seedings=seeded(seeds))
    assert why.startswith("torch is seeded from Python's random, itself unseeded "
                          "(torch.manual_seed at t.py:9; run 1: 3, run 2: 4)")
    # a constant seed explains nothing; a reproducible check has no cause to name
    _, why, _ = cause.classify(reproducible=False, failed=False, divergent_signal="rng.torch",
                            environments=[{}, {}], uses_dataloader=True,
                            seedings=seeded(seed_records(None, (7, 7))))
    assert why == cause.EXPLANATION["rng"]
    assert classify(None, reproducible=True) == "none"


def generator_records(fp: str, drawn: int | None = 1, how: str = "entropy") -> list[GeneratorNote]:
    recs: list[dict[str, Any]] = [
        {"key": "t.py:5#0", "kind": "torch", "event": 0, "how": "default", "created": True,
         "fp": "same", "location": {"file": "t.py", "line": 5, "function": "main"},
         "stack": [{"file": "t.py", "line": 5, "function": "main"}]},
        {"key": "t.py:5#0", "kind": "torch", "event": 1, "how": how, "created": False,
         "fp": fp, "location": {"file": "t.py", "line": 6, "function": "main"}}]
    if drawn is not None:
        recs.append({"key": "t.py:5#0", "drawn": drawn})
    return [n for n in map(generator_note, recs) if n is not None]


@pytest.mark.parametrize("signal", ["loss", "batch", "grads", "init"])
def test_a_private_generator_seeded_differently_is_rng_with_where_it_was_made(
        signal: str) -> None:
    gens = {1: generator_records("a"), 2: generator_records("b")}
    got, why, where = cause.classify(reproducible=False, failed=False, divergent_signal=signal,
                                     environments=[{}, {}], uses_dataloader=True,
                                     generators=gens, divergence=(2, 1))
    assert got == "rng" and where == Location("t.py", 5, "main")
    assert "a torch.Generator made at t.py:5, seeded from OS entropy (no seed given) at t.py:6" \
        in why


def test_a_private_generator_explains_nothing_it_did_not_draw_before_the_step() -> None:
    def got(gens: dict[int, list[GeneratorNote]], step: int = 2) -> str | None:
        return cause.classify(reproducible=False, failed=False, divergent_signal="loss",
                              environments=[{}, {}], uses_dataloader=True, generators=gens,
                              divergence=(2, step))[0]

    assert got({1: generator_records("a", drawn=3), 2: generator_records("b", drawn=3)}) \
        == "compute"  # first drawn after the divergence
    assert got({1: generator_records("a", drawn=None), 2: generator_records("b", None)}) \
        == "compute"  # never drawn
    assert got({1: generator_records("a"), 2: generator_records("a")}) == "compute"  # same seed
    # the rng.* streams come first: a global stream differing is named by its signal
    assert cause.classify(reproducible=False, failed=False, divergent_signal="rng.numpy",
                          environments=[{}, {}], uses_dataloader=True,
                          generators={1: generator_records("a"), 2: generator_records("b")},
                          divergence=(2, 1))[2] is None
    found = cause.private_generator(generator_records("a", how="clock"),
                                    generator_records("b", how="clock"), 1)
    assert found is not None and "seeded from the clock" in found.detail


@pytest.mark.parametrize("body", [
    None, [], "x", {}, {"key": 5}, {"key": "k", "drawn": "1"}, {"key": "k", "drawn": True},
    {"key": "k", "event": 0, "kind": "cuda", "fp": "a"},
    {"key": "k", "event": "0", "kind": "torch", "fp": "a"},
    {"key": "k", "event": 0, "kind": "torch", "fp": 3},
])
def test_a_malformed_generator_record_from_a_run_is_dropped(body: Any) -> None:
    assert generator_note(body) is None


def test_a_generator_record_is_cut_to_what_is_used() -> None:
    rec = generator_note({
        "key": "k" * 10_000, "event": 0, "kind": "numpy", "fp": "f" * 500, "how": "h" * 99,
        "created": 1, "state": [1] * 1000, "extra": "x",
        "location": {"file": "t.py", "line": True, "function": "f"},
        "stack": [{"file": "a.py", "line": 1, "function": None}, "junk"] * 20})
    assert isinstance(rec, GeneratorSeeded) and len(rec.key) == 4200 and len(rec.fp) == 64
    assert rec.created is False and rec.location is None and not hasattr(rec, "state")
    assert len(rec.how) == 40 and not hasattr(rec, "extra")
    assert rec.stack == (Location("a.py", 1, None),) * 4


def test_a_data_cause_names_the_dataloader_whose_epoch_delivered_the_step() -> None:
    made = [{"loader": n, "made": 0, "dataset": name, "workers": w,
             "location": {"file": "t.py", "line": line, "function": "main"}, "stack": []}
            for n, name, w, line in ((0, "Train", 2, 10), (1, "Val", 0, 11))]
    loaders = [n for n in map(loader_note, [made[0], made[1], {"loader": 0, "iter": 1},
                                            {"loader": 1, "iter": 5}, {"loader": 0, "iter": 6}])
               if n is not None]
    assert cause.loader_at(loaders, 3) is loaders[0] and cause.loader_at(loaders, 5) is loaders[1]
    assert cause.loader_at(loaders, 7) is loaders[0] and cause.loader_at(loaders[:2], 3) is None
    got, why, where = cause.classify(reproducible=False, failed=False, divergent_signal="batch",
                                     environments=[{}, {}], uses_dataloader=True,
                                     divergence=(2, 3), loaders=loaders)
    assert got == "data" and where == Location("t.py", 10, "main")
    assert why.endswith("the DataLoader made at t.py:10 (dataset Train, 2 workers)")
    assert loader_note({"loader": 0, "iter": True}) is None
    assert loader_note({"loader": "0", "made": 1}) is None
    rec = loader_note({"loader": 0, "made": 1, "workers": "many", "location": 5,
                       "dataset": "D" * 999})
    assert isinstance(rec, LoaderMade) and rec.workers == 0 and rec.location is None
    assert len(rec.dataset) == 200


def _seeds(call: str, **more: Any) -> dict[int, list[dict[str, Any]]]:
    """Each run's seeding record of one call at t.py:7 (``values``: per run)."""
    values = more.pop("values")
    return {run: [{"component": "torch", "key": call, "where": "t.py:7", "value": v, **more}]
            for run, v in enumerate(values, 1)}


def _why(signal: str, seedings: Any, step: int = 3) -> tuple[Any, ...]:
    env = {"torch": "2.14"}
    return cause.classify(reproducible=False, failed=False, divergent_signal=signal,
                          environments=[env, dict(env)], uses_dataloader=True,
                          seedings=seeded(seedings), divergence=(2, step))


def test_a_coarse_clock_seed_is_the_clock_only_when_the_runs_agree_on_the_field() -> None:
    got, why, where = _why("rng.torch", _seeds("torch.manual_seed", values=[13, 14],
                                               clock_fields=["hour"], at_step=1))
    assert got == "rng" and "seeded from the clock" in why and "the hour of the time" in why
    assert where == Location("t.py", 7, None)
    # the same constant in both runs, equal to the hour by chance: no clock, no seeding cause
    got, why, where = _why("loss", _seeds("torch.manual_seed", values=[17, 17],
                                          clock_fields=["hour"], at_step=3))
    assert got == "compute" and where is None


def test_a_reseed_that_differs_during_the_divergent_step_is_the_cause() -> None:
    """A global stream reseeded with a different seed mid-step (its state agreed at the start):
    rng at the call, not compute; a call in an earlier step or a constant is not."""
    seeds = _seeds("torch.seed", values=[111, 222], source="entropy", at_step=3)
    got, why, where = _why("loss", seeds)
    assert got == "rng" and "OS entropy" in why and where is not None and where.line == 7
    assert _why("loss", seeds, step=4)[0] == "compute"
    assert _why("loss", _seeds("torch.manual_seed", values=[5, 5], at_step=3))[0] == "compute"
    # the main process's reseed does not explain a batch; one in the DataLoader's workers does
    assert _why("batch", seeds)[0] == "data"
    worker = _seeds("numpy.random.seed", values=[None, None], source="entropy", at_step=1,
                    worker=0)
    for recs in worker.values():
        recs[0]["component"] = "numpy"
    got, why, where = _why("batch", worker, step=2)
    assert got == "rng" and "DataLoader's workers" in why and where is not None and where.line == 7


# ---- RL environments: the first call whose observation differs ----------------------------

def env(n: int, call: str, obs: str, step: int = 0, action: str | None = None,
        line: int = 40) -> EnvCall:
    """An environment call's record as a run sends it (checked by payloads.env_call)."""
    rec = env_call({"n": n, "call": call, "obs": obs, "action": action, "step": step,
                            "loc": {"file": "dqn.py", "line": line, "function": "main"}})
    assert rec is not None
    return rec


def test_an_unseeded_reset_before_the_loop_is_the_cause_not_the_computation() -> None:
    """envs.reset() at line 40, then 30 steps with the same actions before step 1: the loss
    differs at step 1 (compute), but the reset's observation differed first."""
    def run(first: str) -> list[EnvCall]:
        return [env(1, "reset", first)] + [env(n, "step", f"{first}{n}", action=f"a{n}",
                                               line=50) for n in range(2, 32)]

    got = cause.classify(reproducible=False, failed=False, divergent_signal="loss",
                         environments=[], uses_dataloader=False,
                         env_calls={1: run("x"), 2: run("y")}, divergence=(2, 1))
    assert got[0] == "rng" and got[2] == Location("dqn.py", 40, "main")
    assert "env.reset() at dqn.py:40 differs between the runs (the environment's call 1, " \
        "before step 1)" in got[1]
    assert "envs.reset(seed=...)" in got[1]
    # the same observations: the computation it is
    same = cause.classify(reproducible=False, failed=False, divergent_signal="loss",
                          environments=[], uses_dataloader=False,
                          env_calls={1: run("x"), 2: run("x")}, divergence=(2, 1))
    assert same[0] == "compute" and same[2] is None


def test_an_observation_that_follows_another_action_or_the_divergence_is_no_source() -> None:
    """A step given another action while every observation agreed is where it parted (what
    chose the action), not the observation that follows from it; a call made at or after the
    divergent step is too late."""
    a = [env(1, "reset", "r"), env(2, "step", "s1", action="left", step=0),
         env(3, "step", "s2", action="left", step=3)]
    other_action = [env(1, "reset", "r"), env(2, "step", "t1", action="right", step=0)]
    chosen = cause.env_call_differs(a, other_action, before_step=1)
    assert chosen is not None and chosen.call == "step"
    assert chosen.detail.startswith("the action given to env.step() at dqn.py:40 differs "
                                    "between the runs (the environment's call 2, before step 1)")
    assert "action_space.seed(" in chosen.detail and "observation returned" not in chosen.detail
    late = [env(1, "reset", "r"), env(2, "step", "s1", action="left"),
            env(3, "step", "t2", action="left", step=3)]
    assert cause.env_call_differs(a, late, before_step=3) is None
    found = cause.env_call_differs(a, late, before_step=4)
    assert found is not None and found.call == "step" and "after step 3" in found.detail
    assert "for the same action" in found.detail


@pytest.mark.parametrize("body", [None, [], {"n": "1", "call": "reset", "obs": "x", "step": 0},
                                  {"n": 1, "call": "render", "obs": "x", "step": 0},
                                  {"n": 1, "call": "reset", "obs": 3, "step": 0},
                                  {"n": True, "call": "reset", "obs": "x", "step": 0}])
def test_a_malformed_environment_record_from_a_run_is_dropped(body: Any) -> None:
    assert env_call(body) is None
