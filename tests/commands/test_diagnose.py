"""``diagnose`` on the zoo of broken workloads: each one's known source is named.

One diagnose run per fixture (module-scoped) serves every assertion about it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from repro_check.trace.payloads import SeedOverride
from repro_check.api import check
from repro_check.errors import UsageError
from repro_check.commands.diagnose import (
    THREADS_HINT,
    PairResult,
    diagnose,
    explain_localization,
    verdicts,
)
from repro_check.diagnose.localize import Localization
from repro_check.diagnose.sources import DEFAULT_MAX_SOURCES
from repro_check.report.model import DiagnosisPart, Report
from repro_check.run.runner import RunResult

from ..conftest import FIXTURES, CliResult, run_cli, run_plain

ZOO = FIXTURES / "zoo"


def target(name: str) -> str:
    return f"{ZOO / name}.py:main"


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("diagnose")


def run(name: str, tmp: Path, **options: Any) -> Report:
    """``diagnose`` up to the first source (the search beyond it: ``test_sources.py``)."""
    options.setdefault("ablate", [])
    options.setdefault("max_sources", 0)
    return diagnose(target(name), trace_dir=tmp / name, **options)


@pytest.fixture(scope="module")
def default_rng(tmp: Path) -> Report:
    # one source looked for: the first is found, no pinned pair runs (test_max_sources_...)
    return run("numpy_default_rng", tmp, max_sources=1)


@pytest.fixture(scope="module")
def unseeded_env(tmp: Path) -> Report:
    return diagnose(f"{FIXTURES / 'hazards' / 'unseeded_env.py'}:main", ablate=[],
                    max_sources=0, max_steps=2, trace_dir=tmp / "env")


@pytest.mark.slow
def test_an_unseeded_environment_is_named_where_its_observation_enters(
        unseeded_env: Report) -> None:
    """An environment reset without a seed (gymnasium's way: OS entropy): the Q-network's first
    op gets a different observation, which no op produced. Not ``compute``: ``rng``, at the line
    that made the observation a tensor, saying what to seed."""
    d = unseeded_env.to_dict()
    assert d["cause"] == "rng" and d["first_divergent_step"] == 1
    assert d["divergent_signal"] in ("loss", "grads")
    assert d["cause_location"] == {"file": str(FIXTURES / "hazards" / "unseeded_env.py"),
                                   "line": 59, "function": "main"}
    detail = d["cause_detail"]
    assert "nondeterministic computation" not in detail and "not a nondeterministic op" in detail
    assert "torch.as_tensor" in detail and "env.reset(seed=" in detail
    assert "action_space.seed(" in detail
    loc = d["localization"]
    assert loc["cause"] == "rng" and loc["inputs_agree"] is False
    assert loc["entered"]["line"] == 59 and loc["entered_by"] == "torch.as_tensor"


@pytest.fixture(scope="module")
def gym_env(tmp: Path) -> Report:
    pytest.importorskip("gymnasium", reason="gymnasium is not installed (make test-frameworks "
                        "installs it and runs this test)")
    return diagnose(f"{FIXTURES / 'gym_env.py'}:main", ablate=[], max_sources=0, max_steps=2,
                    trace_dir=tmp / "gym")


@pytest.mark.frameworks
def test_a_gymnasium_reset_without_a_seed_is_named_as_the_environment_call(
        gym_env: Report) -> None:
    """A real gymnasium environment (made through ``gym.make``, so wrapped) reset without a
    seed: the observation that entered at ``torch.as_tensor`` is traced to the ``env.reset()``
    that returned it, which becomes the cause's location, with what to seed."""
    path = str(FIXTURES / "gym_env.py")
    lines = (FIXTURES / "gym_env.py").read_text().splitlines()
    reset_line = next(n for n, text in enumerate(lines, 1) if "env.reset()" in text)
    made_line = next(n for n, text in enumerate(lines, 1) if "torch.as_tensor(obs)" in text)
    d = gym_env.to_dict()
    assert d["cause"] == "rng" and d["first_divergent_step"] == 1
    assert d["cause_location"] == {"file": path, "line": reset_line, "function": "main"}
    loc = d["localization"]
    assert loc["env_call"] == {"call": "reset", "file": path, "line": reset_line,
                               "function": "main"}
    assert loc["entered"]["line"] == made_line and loc["entered_by"] == "torch.as_tensor"
    detail = d["cause_detail"]
    assert f"env.reset() at {path}:{reset_line} differs between the runs" in detail
    assert "env.reset(seed=...)" in detail and "env.action_space" in detail


@pytest.fixture(scope="module")
def eval_noise(tmp: Path) -> Report:
    return run("eval_noise", tmp)


@pytest.fixture(scope="module")
def control(tmp: Path) -> Report:
    # the search for sources on (its default bound): it finds none and runs no pinned pair
    return run("control", tmp, max_sources=DEFAULT_MAX_SOURCES)


@pytest.fixture(scope="module")
def unpool(tmp: Path) -> Report:
    return run("unpool", tmp)


@pytest.fixture(scope="module")
def own_generator(tmp: Path) -> Report:
    return run("own_generator", tmp)


@pytest.fixture(scope="module")
def gan_workers(tmp: Path) -> Report:
    return run("gan_workers", tmp)


@pytest.fixture(scope="module")
def hash_order(tmp: Path) -> CliResult:
    # two components a dataset order could plausibly depend on (all nine would cost 4x); a
    # --seed given must not stop the ablation's own pair without seeding
    return run_cli("diagnose", "zoo/hash_order.py:main", "--seed", "123", "--max-steps", "2",
                   "--ablate", "hashseed,dataloader", tmp=tmp / "hash")


@pytest.mark.slow
def test_default_rng_in_the_data_pipeline_is_rng_with_its_line(default_rng: Report) -> None:
    d = default_rng.to_dict()
    assert d["cause"] == "rng" and d["divergent_signal"] == "batch"
    assert "numpy Generator (default_rng)" in d["cause_detail"]
    assert Path(d["cause_location"]["file"]).name == "numpy_default_rng.py"


@pytest.mark.slow
def test_a_random_op_whose_generator_differs_is_rng_not_compute(own_generator: Report) -> None:
    d = own_generator.to_dict()
    assert d["divergent_signal"] == "loss" and d["first_divergent_step"] == 1
    assert d["cause"] == "rng" and "not deterministic" not in d["cause_detail"]
    assert "torch.Generator made at" in d["cause_detail"]  # the check names the generator
    assert d["cause_location"]["line"] == 16 and d["cause_location"]["function"] == "__init__"
    assert d["culprit"] == "Net.encoder.2" and d["culprit_op"] == "aten::randn"
    loc = d["localization"]
    assert loc["cause"] == "rng" and loc["inputs_agree"] is True
    assert "random generator it draws from is in a different state" in loc["detail"]


@pytest.mark.slow
def test_workers_batches_are_not_the_culprit_and_modules_are_qualified(
        gan_workers: Report) -> None:
    """Two DataLoader workers deliver the batches; both models have a ``main.1``."""
    d = gan_workers.to_dict()
    assert d["cause"] == "rng" and d["first_divergent_step"] == 1  # OS entropy, no op's fault
    assert d["culprit"] == "Discriminator.main.1", d["localization"]
    assert d["culprit_op"] not in ("aten::set_", "aten::empty")
    assert d["localization"]["phase"] == "forward"


def test_threads_are_named_when_every_op_agrees_and_threads_were_not_pinned() -> None:
    def explained(threads: int | None, overrides: list[SeedOverride]) -> str:
        result = RunResult(1, overrides=overrides)
        report = Report("t:main", [], 0, [], 2, [result], None, threads=threads)
        loc = Localization(4, detail="all 120 recorded ops of step 4 agree in both replays")
        explain_localization(report, DiagnosisPart(), loc)
        assert report.diagnosis is None and report.cause is None
        return loc.detail

    assert explained(None, []).endswith(THREADS_HINT) and "--threads" in THREADS_HINT
    assert explained(2, [SeedOverride("threads", "set_num_threads", 8, has_value=True)]) \
        .endswith(THREADS_HINT)
    assert THREADS_HINT not in explained(1, [])


@pytest.mark.slow
def test_nondeterministic_evaluation_is_metrics(eval_noise: Report) -> None:
    d = eval_noise.to_dict()
    assert d["cause"] == "metrics" and d["first_divergent_step"] is None
    assert d["divergent_signal"] == "metric:eval_mse" and d["steps"] == [6, 6]


def test_deterministic_control_is_none_with_no_source_and_no_pinned_run(control: Report) -> None:
    d = control.to_dict()
    assert d["reproducible"] is True and d["cause"] == "none" and d["exit_code"] == 0
    assert d["flagged_ops"] == [] and d["culprit"] is None
    x = control.diagnosis
    assert x is not None and x.sources == []
    assert x.sources_cost is not None and x.sources_cost.runs == 0
    assert d["sources"] == []


@pytest.mark.slow
def test_max_sources_bounds_the_runs(default_rng: Report) -> None:
    """``max_sources=1``: the first source is listed, no pinned pair goes on to look for more."""
    x = default_rng.diagnosis
    assert x is not None and len(x.sources) == 1 and x.sources_cost is not None
    assert x.sources_cost.runs == 0
    assert "--max-sources 1" in (x.sources_note or "")
    with pytest.raises(UsageError):
        diagnose(target("numpy_default_rng"), ablate=[], max_sources=-1)


def test_flagged_op_listed_with_its_first_step(unpool: Report) -> None:
    flagged = unpool.to_dict()["flagged_ops"]
    assert [f["op"] for f in flagged] == ["max_unpooling2d_forward_out"]
    assert flagged[0]["step"] == 1 and flagged[0]["runs"] == [1, 2]
    assert flagged[0]["where"].endswith("unpool.py:17")
    assert unpool.reproducible  # flagged is not the same as diverging


@pytest.mark.slow
def test_hash_order_needs_hashseed(hash_order: CliResult) -> None:
    assert hash_order.code == 0, hash_order.stdout + hash_order.stderr
    r = hash_order.report
    assert r["reproducible"] is True and r["cause"] == "none" and r["seed"] == 123
    assert r["necessary_components"] == ["hashseed"]
    rows = {row["component"]: row for row in r["ablation"]}
    assert rows["hashseed"]["reproducible"] is False and rows["hashseed"]["cause"] == "data"
    assert rows["hashseed"]["divergent_signal"] == "batch"
    assert all(rows[c]["reproducible"] for c in rows if c not in ("hashseed", None))
    assert list(rows) == ["hashseed", "dataloader", None]
    assert rows[None]["reproducible"] is False  # the pair without any seeding
    assert all(row["off"] for row in r["ablation"])
    out = hash_order.stdout
    assert "Seeding ablation" in out and "necessary components: hashseed" in out
    assert any(line.split()[:2] == ["hashseed", "needed"] for line in out.splitlines())


@pytest.mark.slow
def test_global_numpy_without_its_seed_is_rng(tmp: Path) -> None:
    rep = check(target("global_numpy"), without=["numpy"], trace_dir=tmp / "gn")
    assert rep.cause == "rng" and rep.divergent_signal == "rng.numpy"
    assert rep.first_divergent_step == 1


def test_verdicts_need_a_reproducible_baseline() -> None:
    ok = PairResult("full", [], True)
    off = {"numpy": PairResult("w/o numpy", ["numpy"], False),
           "python": PairResult("w/o python", ["python"], True),
           "cuda": PairResult("w/o cuda", ["cuda"], False, error="boom")}
    assert verdicts(ok, off) == {"numpy": "needed", "python": "not needed", "cuda": "unknown"}
    broken = PairResult("full", [], False)
    assert set(verdicts(broken, off).values()) == {"unknown"}


def test_diagnose_usage_errors() -> None:
    with pytest.raises(UsageError, match="full seeding"):  # the Python API says why
        diagnose("tiny:main", no_seed=True)
    res = run_plain("diagnose", "tiny:main", "--ablate", "numpi")
    assert res.code == 2 and "did you mean 'numpy'" in res.stderr


def test_a_negative_max_sources_is_a_usage_error_before_any_run(tmp_path: Path) -> None:
    """(The bound itself, one source listed and no pinned pair, is asserted on a real
    diagnose in the slow tier.)"""
    with pytest.raises(UsageError):
        diagnose(target("numpy_default_rng"), ablate=[], max_sources=-1,
                 trace_dir=tmp_path / "none")
    assert not (tmp_path / "none").exists()


@pytest.mark.slow
def test_a_compiled_model_that_differs_run_to_run_is_named_with_its_largest_difference(
        tmp_path: Path) -> None:
    """The probe runs let the compiled model run compiled (under the op recorder PyTorch
    would run it eagerly, and the runs would agree): the culprit is the compiled model as a
    whole, with the largest difference of its output, and nothing inside it is named."""
    import shutil

    if shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.skip("torch.compile on the CPU needs a C++ compiler")
    res = run_cli("diagnose", "compiled_differs.py:main", "--max-steps", "1", "--", "--steps",
                  "1", tmp=tmp_path, timeout=900)
    assert res.code == 1, res.stdout + res.stderr
    d = res.report
    assert d is not None and d["first_divergent_step"] == 1
    assert d["culprit"] == "Sequential" and d["culprit_op"] is None
    loc = d["localization"]
    assert loc["found"] and loc["cause"] == "compute" and loc["inputs_agree"] is True
    out = loc["output_difference"]
    assert out["module"] == "Sequential" and out["compiled"] and out["shape"] == [32, 1]
    assert 0 < out["largest"] < 1e-3  # a pid-sized multiple of 1e-6 through the last Linear
    assert "the compiled Sequential (torch.compile) returns other bits" in loc["detail"]
    assert "culprit: Sequential · compiled code (torch.compile)" in res.stdout
    # inside it, PyTorch's DebugMode: inductor's extern addmm is the first call whose output
    # differs, its input already differing (the offset is fused into a CPU kernel it cannot see)
    inside = loc["compiled_call"]
    assert inside["model"] == "Sequential" and inside["calls"] > 0 and not inside["one_side"]
    assert inside["name"] == "aten.addmm.default" and inside["inputs_agree"] is False
    assert inside["graphs"] >= 1 and any("getpid" in b for b in inside["breaks"])
    assert "PyTorch's DebugMode recorded" in loc["detail"]
