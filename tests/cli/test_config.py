"""[tool.repro-check] in pyproject.toml: found upward, validated, overridden by flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from repro_check import cli
from repro_check.config import find, load, slug
from repro_check.errors import UsageError

FULL = """\
[project]
name = "demo"

[tool.repro-check]
seed = 123
runs = 3
record-runs = 5
max-steps = 200
threads = 2
timeout = 600
without = ["cudnn"]
args = ["--epochs", "1"]
golden-dir = "goldens"
atol = { default = 1e-6, loss = 1e-5 }
rtol = 1e-4
ulps = { "metric:*" = 4 }
band-widen = 1.5
junit = "reports/junit.xml"
targets = [
    "train:main",
    { target = "tiny.py:main", golden = "g/tiny.json", max-steps = 5, args = ["--steps", "5"] },
]
"""


def project(tmp_path: Path, text: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(text)
    return tmp_path


def test_every_key_is_read(tmp_path: Path) -> None:
    cfg = load(start=project(tmp_path, FULL))
    assert cfg.path == (tmp_path / "pyproject.toml").resolve()
    assert cfg.values["seed"] == 123 and cfg.values["runs"] == 3 and cfg.values["threads"] == 2
    assert cfg.values["without"] == ["cudnn"] and cfg.values["timeout"] == 600.0
    assert [e.target for e in cfg.targets] == ["train:main", "tiny.py:main"]
    tiny = cfg.entry("tiny.py:main")
    assert tiny is not None and cfg.get("max-steps", tiny) == 5 and cfg.get("max-steps") == 200
    assert cfg.get("args", tiny) == ["--steps", "5"] and cfg.get("args", cfg.entry("train:main")) \
        == ["--epochs", "1"]
    root = tmp_path.resolve()
    assert cfg.golden_for("tiny.py:main") == root / "g" / "tiny.json"
    assert cfg.golden_for("train:main") == root / "goldens" / "train-main.json"
    assert cfg.path_of("junit") == root / "reports" / "junit.xml"
    policy = cfg.tolerances.policy()
    assert policy.for_name("loss").atol == 1e-5 and policy.default.rtol == 1e-4
    assert policy.for_name("metric:acc").ulps == 4 and policy.band_widen == 1.5


def test_found_from_a_subfolder_and_absent_is_empty(tmp_path: Path) -> None:
    root = project(tmp_path, FULL)
    deep = root / "a" / "b"
    deep.mkdir(parents=True)
    assert find(deep) == root.resolve() / "pyproject.toml"
    assert load(start=deep).values["seed"] == 123
    other = tmp_path / "other"
    other.mkdir()
    (other / "pyproject.toml").write_text('[project]\nname = "x"\n')
    cfg = load(start=other)  # the nearest pyproject.toml wins, even without the table
    assert cfg.values == {} and cfg.targets == []


def test_slug() -> None:
    assert slug("fixtures/tiny.py:main") == "fixtures-tiny.py-main"


@pytest.mark.parametrize("text, message", [
    ("runs = 1", "runs: expected a whole number >= 2, got 1"),
    ("seed = -3", "seed: expected a whole number from 0"),
    ("seed = true", "seed: expected a whole number"),
    ("timeout = 0", "timeout: expected a number > 0"),
    ("max-steps = 'ten'", "max-steps: expected a whole number >= 1, got 'ten'"),
    ("without = ['numpi']", "did you mean 'numpy'"),
    ("atol = -1", "atol: must be a finite number >= 0"),
    ("atol = { loss = 'x' }", "atol.loss: expected a number"),
    ("ulps = 1.5", "expected a whole number of ulps"),
    ("band-widen = 0.5", "band-widen: expected a number >= 1"),
    ("sede = 1", "unknown key 'sede' (did you mean 'seed'?)"),
    ("targets = [3]", "targets[0]: expected a TARGET string or a table"),
    ("targets = [{ golden = 'g.json' }]", "targets[0]: a table needs a 'target'"),
    ("targets = [{ target = 't:main', golde = 'g.json' }]", "unknown key targets[0].'golde'"),
    ("targets = ['a:main', 'a:main']", "each target may be listed once"),
    ("seed = ", "invalid TOML"),
    ("doctor = 3", "tool.repro-check.doctor must be a table"),
    ("doctor.ignored = []", "unknown key 'ignored' in [tool.repro-check.doctor] (known: ignore)"),
    ("doctor.ignore = 'RC101'", "tool.repro-check.doctor.ignore must be a list of codes, got 'RC101'"),
    ("doctor.ignore = ['101']", "doctor.ignore: unknown code '101' (did you mean 'RC101'?)"),
    ("doctor.ignore = [1]", 'doctor.ignore: expected codes like "RC101", got 1'),
])
def test_a_bad_value_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    project(tmp_path, f"[tool.repro-check]\n{text}\n")
    with pytest.raises(UsageError) as err:
        load(start=tmp_path)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith(str((tmp_path / "pyproject.toml")))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.console_main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_reports_a_bad_config_as_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project(tmp_path, "[tool.repro-check]\nruns = 'two'\n"))
    for argv in (["tiny:main"], ["verify"], ["record", "x:main"], ["diff", "a", "b"]):
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
        assert "runs: expected a whole number >= 2, got 'two'" in err


def test_cli_needs_a_target_or_configured_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project(tmp_path, '[project]\nname = "x"\n'))
    assert "the following arguments are required: TARGET" in run(capsys)[2]
    assert "verify needs TARGET and --golden PATH" in run(capsys, "verify")[2]
    assert "record needs TARGET" in run(capsys, "record")[2]
    assert "verify needs --golden PATH for t:main" in run(capsys, "verify", "t:main")[2]


def test_configured_goldens_are_checked_before_anything_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project(tmp_path, '[tool.repro-check]\ntargets = ["t.py:main"]\n'
                                        'golden = "golden.json"\n'))
    code, out, err = run(capsys, "verify")
    assert code == 2 and "golden.json: no such file" in err
    code, out, err = run(capsys, "--config", str(tmp_path / "nope.toml"), "t.py:main")
    assert code == 2 and "--config" in err and "no such file" in err


def test_flags_override_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from repro_check.cli.plan import options_for

    cfg = load(start=project(tmp_path, FULL))
    entry = cfg.entry("tiny.py:main")
    ns = argparse.Namespace(seed=9, no_seed=False, without=None, max_steps=None, timeout=None,
                            threads=None)
    o = options_for(ns, cfg, "tiny.py:main", entry, None)
    assert o.seed == 9 and o.max_steps == 5 and o.threads == 2
    assert o.args == ("--steps", "5") and o.without == ("cudnn",)
    assert options_for(ns, cfg, "tiny.py:main", entry, ["--lr", "1"]).args == ("--lr", "1")


def test_the_doctor_table_is_read_with_the_rest(tmp_path: Path) -> None:
    cfg = load(start=project(tmp_path, '[tool.repro-check]\nseed = 3\n\n'
                                       '[tool.repro-check.doctor]\nignore = ["rc107", "RC113"]\n'))
    assert cfg.values["seed"] == 3 and cfg.doctor_ignore == {"RC107", "RC113"}
    assert load(start=project(tmp_path, '[tool.repro-check]\nseed = 3\n')).doctor_ignore == set()


def test_with_table_passes_over_files_without_one(tmp_path: Path) -> None:
    root = project(tmp_path, '[tool]\nrepro-check.doctor.ignore = ["RC107"]\n')
    sub = root / "sub"
    sub.mkdir()
    (sub / "pyproject.toml").write_text('[project]\nname = "sub"\n')
    assert load(start=sub).path == (sub / "pyproject.toml").resolve()
    assert load(start=sub).doctor_ignore == set()
    cfg = load(start=sub, with_table=True)
    assert cfg.path == (root / "pyproject.toml").resolve() and cfg.doctor_ignore == {"RC107"}


@pytest.mark.slow
def test_diagnose_honours_the_config(tmp_path: Path) -> None:
    """``diagnose`` runs with the project's settings: the table's seed and max steps, the target
    entry's arguments and threads (here planting a divergence at step 2); not the table's
    ``no-seed`` or ``runs``, which are a check's (diagnose starts from seeding, with pairs)."""
    import json
    import shutil

    from ..conftest import repro_check_cli

    # fixtures/tiny.py's options without torch.optim (seconds of torch._dynamo a run saved)
    shutil.copyfile(Path(__file__).with_name("cli_tiny.py"), tmp_path / "tiny.py")
    project(tmp_path, "[tool.repro-check]\nseed = 123\nmax-steps = 3\nno-seed = true\nruns = 5\n"
                      'targets = [{ target = "tiny.py:main", threads = 2, '
                      'args = ["--steps", "6", "--diverge-at", "2"] }]\n')
    proc = repro_check_cli(
        ["diagnose", "tiny.py:main", "--no-ablation", "--no-localize", "--max-sources", "0",
         "--json", "report.json", "--quiet"], cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["seed"] == 123 and report["threads"] == 2 and report["runs"] == 2
    assert report["steps"] == [3, 3] and report["first_divergent_step"] == 2
    assert "--max-steps" in report["replay"] and "--seed 123" in report["replay"]
