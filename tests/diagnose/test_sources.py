"""``diagnose`` pins each source it finds and goes on: every source of a zoo fixture is listed,
in order, with its step, cause and line; a pin hides nothing but its own source.

One diagnose run per fixture (module-scoped) serves every assertion about it.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from repro_check.commands.diagnose import diagnose
from repro_check.diagnose.sources import identify
from repro_check.report.contents import Source
from repro_check.report.model import Report

from ..conftest import FIXTURES, CliResult, run_cli

def zoo(name: str) -> str:
    """The TARGET of a zoo fixture."""
    return f"{FIXTURES / 'zoo' / name}.py:main"


def summary(sources: list[dict[str, Any]] | list[Source]) -> list[tuple[Any, ...]]:
    """(step, signal, cause, file name, line) of each source (from the JSON, or typed)."""
    rows = [s.to_dict() if isinstance(s, Source) else s for s in sources]
    return [(s["step"], s["signal"], s["cause"],
             Path(s["location"]["file"]).name if s["location"] else None,
             s["location"]["line"] if s["location"] else None) for s in rows]


Temp = pytest.TempPathFactory


@pytest.fixture(scope="module")
def two(tmp_path_factory: Temp) -> Report:
    # ablate every component (None): skipped at no cost, the runs are not reproducible
    return diagnose(zoo("two_sources"), ablate=None, trace_dir=tmp_path_factory.mktemp("two"))


@pytest.fixture(scope="module")
def three(tmp_path_factory: Temp) -> CliResult:
    return run_cli("diagnose", "zoo/three_sources.py:main", "--without", "hashseed",
                   "--no-ablation", tmp=tmp_path_factory.mktemp("three"))


@pytest.fixture(scope="module")
def compute(tmp_path_factory: Temp) -> Report:
    return diagnose(zoo("compute_then_rng"), ablate=[], keep_replay=True,
                    trace_dir=tmp_path_factory.mktemp("compute"))


@pytest.mark.slow
def test_a_shuffle_generator_seeded_from_the_clock_is_rng_with_its_line(two: Report) -> None:
    """The first source of ``two_sources`` (a DataLoader shuffle generator seeded from the clock)
    is the check's cause: rng in the batch at step 1, at the generator's line, no culprit op; the
    seeding ablation is skipped (not reproducible even under full seeding)."""
    d = two.to_dict()
    assert d["cause"] == "rng" and d["divergent_signal"] == "batch"
    assert "torch.Generator" in d["cause_detail"] and "seeded from the clock" in d["cause_detail"]
    assert Path(d["cause_location"]["file"]).name == "two_sources.py"
    assert d["cause_location"]["line"] == 19
    assert d["first_divergent_step"] == 1 and d["culprit"] is None
    assert d["necessary_components"] is None and "ablation skipped" in d["ablation_note"]


@pytest.mark.slow
def test_a_clock_shuffle_hides_an_unseeded_default_rng(two: Report) -> None:
    x = two.diagnosis
    assert x is not None
    assert summary(x.sources) == [(1, "batch", "rng", "two_sources.py", 19),
                                  (3, "loss", "rng", "two_sources.py", 22)]
    assert "torch.Generator" in x.sources[0].detail and "two_sources.py:20" in \
        x.sources[0].detail  # where the clock seed goes in
    assert "default_rng" in x.sources[1].detail and "entropy" in x.sources[1].detail
    assert all(s.pinned_by for s in x.sources)
    assert x.sources_cost is not None and x.sources_cost.runs == 4
    assert x.sources_note == "with the 2 source(s) above pinned, the runs agree"
    d = two.to_dict()
    # the top-level keys are the first source's: the check names the generator too
    assert d["cause"] == "rng" and d["first_divergent_step"] == 1
    assert d["cause_location"]["line"] == 19
    assert [s["step"] for s in d["sources"]] == [1, 3]
    assert not list(Path(two.trace_dir or "").parent.glob("**/replay"))  # replays deleted


@pytest.mark.slow
def test_three_sources_at_the_same_step(three: CliResult) -> None:
    assert three.code == 1, three.stdout + three.stderr
    r = three.report
    assert r is not None
    # pinning numpy's stream hides neither the dropout generator nor the hash order, all step 1
    assert summary(r["sources"]) == [(1, "rng.numpy", "rng", "three_sources.py", 16),
                                     (1, "batch", "rng", "three_sources.py", 22),
                                     (1, "batch", "data", "three_sources.py", 21)]
    assert [s["pinned_by"] is not None for s in r["sources"]] == [True, True, True]
    assert set(r["sources"][0]) >= {"step", "signal", "cause", "culprit", "culprit_op",
                                    "location", "pinned_by"}
    assert r["sources"][0]["location"]["function"] == "main"
    assert r["sources_cost"]["runs"] == 6
    out = three.stdout
    assert "Sources of non-determinism, in the order found (3;" in out
    assert "1. rng · step 1 · rng.numpy" in out and "3. data · step 1 · batch" in out
    assert "three_sources.py:16 in main" in out
    assert "the batches come from the DataLoader made at" in r["sources"][2]["detail"]
    assert r["sources_note"].startswith("with the 3 source(s) above pinned, the runs agree "
                                        "(replayed batches stand for everything")


@pytest.mark.slow
def test_a_compute_source_is_pinned_by_its_op(compute: Report) -> None:
    x = compute.diagnosis
    assert x is not None
    # os.urandom's bytes become a tensor at line 14 (no op's fault: rng, located there, not at
    # the op that first used them)
    assert summary(x.sources) == [(1, "loss", "rng", "compute_then_rng.py", 14),
                                  (2, "loss", "rng", "compute_then_rng.py", 24)]
    assert x.sources[0].culprit == "Sequential.1" and x.sources[0].culprit_op == "aten::_to_copy"
    assert x.sources[0].culprit_op == x.culprit_op
    assert "random.Random" in x.sources[1].detail
    kept = [Path(p) for p in x.replay_dirs]
    assert len(kept) == 3 and any(kept[1].glob("op-1-*.pt"))  # --keep-replay: on disk


@pytest.mark.slow
def test_urandom_module_is_named_where_the_entropy_enters(compute: Report) -> None:
    """Bytes of os.urandom made a tensor in a module (``compute_then_rng``'s first source): no op
    is nondeterministic; the value entered from outside torch, at the frombuffer line (cause rng,
    and what to do), in the module whose forward first differs."""
    d = compute.to_dict()
    assert d["cause"] == "rng" and d["first_divergent_step"] == 1
    assert "not a nondeterministic op" in d["cause_detail"]
    assert d["cause_location"] == {"file": str(FIXTURES / "zoo" / "compute_then_rng.py"),
                                   "line": 14, "function": "forward"}
    assert d["localization"]["entered_by"] == "torch.frombuffer"
    assert d["divergent_signal"] in ("loss", "grads")
    assert d["culprit"] == "Sequential.1" and d["culprit_op"].startswith("aten::")
    loc = d["localization"]
    assert loc["phase"] == "forward" and loc["step"] == 1 and loc["inputs_agree"] is False
    assert loc["first_module_forward"] == "Sequential.1"


def test_an_undrawn_generator_is_no_source(tmp_path: Path) -> None:
    """A private generator seeded differently counts only once it was drawn from by the step."""
    replay = tmp_path
    for run, fp in ((1, "a"), (2, "b")):
        recs = [{"key": "f.py:3#0", "kind": "torch", "event": 0, "how": "entropy",
                 "created": True, "fp": fp, "location": {"file": "f.py", "line": 3,
                                                         "function": "main"}},
                {"key": "f.py:3#0", "drawn": 4}]
        (replay / f"generators-{run}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in recs))
    report: Any = SimpleNamespace(reproducible=False, error=None, interrupted=False,
                                  first_divergent_step=2, divergent_signal="batch",
                                  cause="data", cause_detail=None, cause_location=None,
                                  comparison=None)
    src = identify(report, replay, [], lambda step: None)
    assert src is not None and src.cause == "data" and src.pin == {"kind": "data", "step": 2}
    report.first_divergent_step = 4
    src = identify(report, replay, [], lambda step: None)
    assert src is not None and src.cause == "rng" and src.location is not None and src.location.line == 3


@pytest.fixture(scope="module")
def midstep(tmp_path_factory: Temp) -> Report:
    return diagnose(zoo("midstep_clock_reseed"), ablate=[], max_steps=4,
                    trace_dir=tmp_path_factory.mktemp("midstep"))


@pytest.fixture(scope="module")
def logged_seed(tmp_path_factory: Temp) -> Report:
    return diagnose(zoo("torch_seed_logged"), ablate=[], max_steps=2,
                    trace_dir=tmp_path_factory.mktemp("logged"))


@pytest.mark.slow
def test_a_mid_step_reseed_from_the_clock_is_one_rng_source_at_its_line(midstep: Report) -> None:
    """torch reseeded from the clock during step 3, before a dropout: not the dropout's compute,
    and not a second source a step later: one source, pinned by run 1's state after the call."""
    x = midstep.diagnosis
    assert x is not None
    assert summary(x.sources) == [(3, "loss", "rng", "midstep_clock_reseed.py", 20)]
    assert "seeded from the clock" in x.sources[0].detail
    assert "after each reseeding at" in x.sources[0].pinned_by
    assert x.sources_note == "with the 1 source(s) above pinned, the runs agree"
    d = midstep.to_dict()
    assert d["cause"] == "rng" and d["cause_location"]["line"] == 20
    assert d["culprit_op"] is None and d["localization"] is None  # the line is known: no replay


@pytest.mark.slow
def test_torch_seed_is_one_source_at_its_line_and_covers_the_model_built_after(
        logged_seed: Report) -> None:
    """torch.seed() (to log the seed), then the model: one ``rng`` source at the call, whose pin
    (run 1's state after the call) also makes the model agree (no second ``init`` source)."""
    x = logged_seed.diagnosis
    assert x is not None
    assert summary(x.sources) == [(1, "rng.torch", "rng", "torch_seed_logged.py", 11)]
    assert x.sources[0].location is not None and x.sources[0].location.function == "main"
    assert "OS entropy" in x.sources[0].detail
    assert x.sources_note == "with the 1 source(s) above pinned, the runs agree"
    assert logged_seed.to_dict()["cause_location"]["line"] == 11
