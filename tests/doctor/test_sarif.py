"""doctor --sarif: SARIF 2.1.0 validated against a schema written from the specification, a rule
per code with its help and the page that documents it; several files at once, as the pre-commit
hook passes them."""

from __future__ import annotations

import copy
import json
import shlex
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from repro_check.cli.main import console_main
from repro_check.doctor_codes import CODES, DOCS_PAGE

ROOT = Path(__file__).resolve().parents[2]
HAZARDS = ROOT / "fixtures" / "hazards"
CLEAN = ROOT / "fixtures" / "clean"
SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif-2.1.0-subset.schema.json").read_text())


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A project with two scripts that share a helper (its finding must be listed once), a
    silenced finding and a clean file."""
    root = tmp_path_factory.mktemp("project")
    (root / "helper.py").write_text("import torch\n\ndef reseed():\n    torch.seed()\n")
    (root / "a.py").write_text("import torch\nimport helper\n\n"
                               "torch.backends.cuda.matmul.allow_tf32 = True\n"
                               "torch.backends.cudnn.benchmark = True  # repro-check: ignore[RC102]\n")
    (root / "b.py").write_text("import helper\nimport os\n\nos.environ['NCCL_ALGO'] = 'NVLS'\n")
    shutil.copy(CLEAN / "tf32_off.py", root / "clean.py")
    return root


@pytest.fixture(scope="module")
def sarif(project: Path) -> dict[str, Any]:
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(project)
        code = console_main(["doctor", "--no-env", "a.py", "b.py", "clean.py",
                             "--sarif", "out.sarif", "--json", "out.json"])
    assert code == 1
    return json.loads((project / "out.sarif").read_text())


def validate(log: dict[str, Any]) -> None:
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    jsonschema.Draft7Validator(SCHEMA).validate(log)


def test_sarif_is_valid_against_the_schema(sarif):
    validate(sarif)
    assert sarif["version"] == "2.1.0" and len(sarif["runs"]) == 1


def test_the_schema_catches_what_the_specification_forbids(sarif):
    """The check could fail: a log without its version, a result without a message, a rule
    without an id, a level SARIF has not, a line 0."""
    breaks = [
        lambda s: s.pop("version"),
        lambda s: s["runs"][0]["results"][0].pop("message"),
        lambda s: s["runs"][0]["tool"]["driver"]["rules"][0].pop("id"),
        lambda s: s["runs"][0]["results"][0].update(level="fatal"),
        lambda s: s["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]
        .update(startLine=0),
        lambda s: s["runs"][0]["results"][0].update(rule="RC101"),
    ]
    for brk in breaks:
        broken = copy.deepcopy(sarif)
        brk(broken)
        with pytest.raises(jsonschema.ValidationError):
            validate(broken)


def test_a_rule_per_code_with_help_and_the_docs_page(sarif):
    rules = sarif["runs"][0]["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == list(CODES)
    page = (ROOT / DOCS_PAGE).read_text()
    for rule in rules:
        code = CODES[rule["id"]]
        assert rule["shortDescription"]["text"] == code.title
        assert code.why in rule["help"]["text"] and code.fix in rule["help"]["text"]
        assert DOCS_PAGE in rule["help"]["text"] and f"]({DOCS_PAGE})" in rule["help"]["markdown"]
        assert f"| {rule['id']} |" in page
        assert rule["name"].isalnum()


def test_results_point_at_the_findings_once_each(sarif, project):
    run = sarif["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    base = Path(run["originalUriBaseIds"]["%SRCROOT%"]["uri"].removeprefix("file://"))
    assert base == project.resolve()
    placed = []
    for r in run["results"]:
        assert rules[r["ruleIndex"]]["id"] == r["ruleId"]
        loc = r["locations"][0]["physicalLocation"]
        assert loc["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
        assert (base / loc["artifactLocation"]["uri"]).is_file()
        placed.append((r["ruleId"], loc["artifactLocation"]["uri"], loc["region"]["startLine"],
                       bool(r.get("suppressions"))))
    # the helper both scripts import is listed once; the silenced finding is a suppressed result
    assert sorted(placed) == [("RC102", "a.py", 5, True), ("RC105", "helper.py", 4, False),
                              ("RC118", "a.py", 4, False), ("RC120", "b.py", 4, False)]
    data = json.loads((project / "out.json").read_text())
    assert data["targets"] == ["a.py", "b.py", "clean.py"]
    assert sorted((f["code"], f["file"], f["line"]) for f in data["findings"]) == sorted(
        (c, f, line) for c, f, line, quiet in placed if not quiet)


def test_sarif_of_clean_files_has_no_results(project, monkeypatch):
    monkeypatch.chdir(project)
    assert console_main(["doctor", "--no-env", "clean.py", "--sarif", "clean.sarif"]) == 0
    log = json.loads((project / "clean.sarif").read_text())
    validate(log)
    assert log["runs"][0]["results"] == []


@pytest.mark.parametrize("argv, message", [
    (["doctor", "--sarif", "x.sarif"], "--sarif needs a TARGET"),
    (["doctor", "a.py", "--sarif", "a.py"], "--sarif 'a.py' is the same file as TARGET"),
    (["doctor", "a.py", "--json", "-", "--sarif", "-"], "cannot both write to standard output"),
    (["doctor", "a.py", "missing.py"], "missing.py"),
])
def test_sarif_usage_errors(argv, message, project, monkeypatch, capsys):
    monkeypatch.chdir(project)
    assert console_main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


# ---- the pre-commit hook ----------------------------------------------------------------------

HOOKS = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())


def test_pre_commit_hooks_run_doctor_on_python_files():
    by_id = {h["id"]: h for h in HOOKS}
    assert {"repro-check-doctor", "repro-check-doctor-system"} <= set(by_id)
    for hook in HOOKS:
        assert hook["types"] == ["python"] and hook.get("pass_filenames", True)
        assert shlex.split(hook["entry"])[:2] == ["repro-check", "doctor"]
        assert hook["language"] in ("python", "system")


@pytest.mark.parametrize("files, code", [
    (["clean.py"], 0),
    (["clean.py", "b.py"], 1),
])
def test_the_hook_entry_with_the_changed_files(files, code, project, monkeypatch, capsys):
    """What pre-commit runs: the hook's entry, then the changed files."""
    monkeypatch.chdir(project)
    entry = shlex.split(HOOKS[0]["entry"])
    assert console_main([*entry[1:], *files]) == code
    out = capsys.readouterr().out
    assert ("RC120" in out) == (code == 1) and "Environment" not in out
