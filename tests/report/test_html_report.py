"""The HTML report: self-contained, plots drawn, the divergence marked, seen in a real browser."""

from __future__ import annotations

import base64
import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
from html import escape as html_escape
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from repro_check.trace import values
from repro_check.compare.steps import compare_traces
from repro_check.report.html import MARKER_COLOR, RUN_COLORS, read_curve, write_html
from repro_check.diagnose.localize import Localization
from repro_check.report.contents import (AblationRow, FlaggedOp, PairResult, Source,
                                         SourcesCost)
from repro_check.report.model import DiagnosisPart, Report
from repro_check.run.options import RunOptions
from repro_check.run.replay import check_runs, replay_line
from repro_check.run.runner import RunResult
from repro_check.trace.seeding import COMPONENTS
from repro_check.trace.format import TraceWriter, header_line, load_trace
from repro_check.trace.results import Location

from ..api_targets import Golden
from repro_check.cli.plan import html_report

from ..conftest import FIXTURES, cli_env, run_cli
from ..recorded import BOTH, replayed_or_live, terminal

# the shared API runs (golden, verify_other_seed): made once a session
pytest_plugins = ["tests.api_runs"]

pytest.importorskip("matplotlib", reason="the HTML report needs the [report] extra")
from PIL import Image  # noqa: E402  (installed with torchvision)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def environment(threads: int) -> dict:
    return {"python": "3.11.7", "torch": "2.14.1", "numpy": "2.4.6", "threads": threads,
            "device": "cpu", "platform": "Linux-6.1-x86_64-with-glibc2.36"}


def write_trace(path: Path, run: int, losses: list[float], accuracy: float, threads: int = 1) -> str:
    w = TraceWriter(path)
    w.write(header_line({"target": "train:main", "run": run, "seed": 123,
                         "environment": environment(threads)}))
    for s, x in enumerate(losses, 1):
        w.write({"step": s, "signals": {"loss": values.encode(np.float32(x))}})
    w.write({"metrics": {"accuracy": values.encode_float64(accuracy)}})
    w.write({"end": {"status": "completed", "steps": len(losses)}})
    return str(w.close())


def losses(steps: int, diverge_at: int | None = None) -> list[float]:
    out = []
    for s in range(1, steps + 1):
        x = 2.3 * 0.97**s + 0.1
        if diverge_at is not None and s >= diverge_at:
            x *= 1 + 2e-3 * (s - diverge_at + 1)
        out.append(x)
    return out


def build_report(folder: Path, runs: list[list[float]], accuracies: list[float],
                 diagnosis: DiagnosisPart | None = None, cause: str | None = None) -> Report:
    """A Report as ``check`` makes it, over trace files written here (no child runs)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [write_trace(folder / f"run-{k}.jsonl", k, r, a, threads=1 if k < 3 else 2)
             for k, (r, a) in enumerate(zip(runs, accuracies), 1)]
    traces = [load_trace(p) for p in paths]
    cmp = compare_traces(traces)
    results = [RunResult(k, status="completed", returncode=0, steps=len(r), seconds=2.0,
                         header=traces[k - 1].header, trace_path=paths[k - 1])
               for k, r in enumerate(runs, 1)]
    report = Report(target="train:main", args=[], seed=123, components=list(COMPONENTS),
                    runs=len(runs), results=results, comparison=cmp, threads=1, cause=cause,
                    diagnosis=diagnosis, trace_dir=str(folder))
    if not report.reproducible:
        report.replay = replay_line(RunOptions("train:main", seed=123), runs=check_runs(len(runs)),
                                    upto=cmp.first_divergent_step)
    return report


def diagnose_part() -> DiagnosisPart:
    """What ``diagnose`` adds: a culprit, a flagged op, two sources, the ablation."""
    return DiagnosisPart(
        culprit="model.embed", culprit_op="scatter_add_",
        localization=Localization(found=True, phase="backward", step=120,
                                  detail="aten::scatter_add_ returned different results"),
        flagged_ops=[FlaggedOp(op="scatter_add_cuda_", step=1, where="train.py:40")],
        sources=[Source(**s) for s in [
            {"step": 120, "signal": "loss", "cause": "compute", "rank": None,
             "detail": "aten::scatter_add_ returned different results", "culprit": "model.embed",
             "culprit_op": "aten::scatter_add_",
             "location": Location("train.py", 40, "forward"),
             "stack": [Location("train.py", 88, "main"),
                       Location("train.py", 40, "forward")],
             "pinned_by": "run 1's outputs of aten::scatter_add_ from step 120 on"},
            {"step": 130, "signal": "batch", "cause": "rng", "rank": None,
             "detail": "seeded from OS entropy (no seed given) at train.py:23",
             "location": Location("train.py", 22, "main"), "stack": [],
             "pinned_by": None},
        ]],
        sources_cost=SourcesCost(runs=4, seconds=31.5),
        ablation=[AblationRow("torch", "needed", PairResult("without torch", ["torch"], False,
                                                            first_divergent_step=1,
                                                            divergent_signal="rng.torch")),
                  AblationRow(None, None, PairResult("no seeding", ["all"], False,
                                                     first_divergent_step=1,
                                                     divergent_signal="rng.torch"))],
        necessary_components=["torch"],
    )


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("html")
    divergent = build_report(
        tmp / "divergent", [losses(300), losses(300, diverge_at=120), losses(300)],
        [0.9463, 0.9459, 0.9463], cause="compute", diagnosis=diagnose_part(),
    )
    divergent.cause_detail = "nondeterministic scatter_add_ in the backward pass"
    divergent.cause_location = Location("train.py", 42, "forward")
    same = build_report(tmp / "same", [losses(300)] * 2, [0.9463] * 2)
    out = {"divergent": tmp / "divergent.html", "same": tmp / "same.html"}
    write_html(divergent, out["divergent"])
    write_html(same, out["same"])
    return out


def images(page: Path) -> dict[str, Image.Image]:
    html = page.read_text(encoding="utf-8")
    found = re.findall(r'<figure id="([^"]+)"><img [^>]*src="data:image/png;base64,([^"]+)"', html)
    return {fig: Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB") for fig, data in found}


def pixels_near(img: Image.Image, colour: str, tol: int = 40) -> int:
    """How many pixels are within ``tol`` of ``colour`` in every channel."""
    want = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)])
    arr = np.asarray(img.convert("RGB"), dtype=int)
    return int((np.abs(arr - want) <= tol).all(axis=2).sum())


# ---- the page ----------------------------------------------------------------------------------
def test_page_is_self_contained(pages: dict[str, Path]) -> None:
    html = pages["divergent"].read_text(encoding="utf-8")
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert not re.search(r"(src|href)=\"(?!data:)", html), "every resource must be inline"
    assert "http://" not in html and "https://" not in html
    assert sorted(images(pages["divergent"])) == ["difference-plot", "loss-plot"]


def test_page_shows_verdict_divergence_groups_metrics_environment(pages: dict[str, Path]) -> None:
    html = pages["divergent"].read_text(encoding="utf-8")
    assert 'id="verdict">NOT REPRODUCIBLE<' in html
    assert "<b>First divergence:</b> step 120, signal <code>loss</code>, run 2 vs run 1" in html
    assert "<li>runs 1, 3</li><li>run 2</li>" in html
    assert "0.9459" in html and "0.9463" in html
    assert 'id="replay">repro-check train:main --seed 123 --runs 3 --max-steps 120<' in html
    # the environment of every run, the differing row marked
    assert "<th>run 1</th><th>run 2</th><th>run 3</th>" in html
    assert '<tr class="differs"><td>threads</td><td>1</td><td>1</td><td>2</td></tr>' in html
    assert '<tr><td>torch</td><td>2.14.1</td><td>2.14.1</td><td>2.14.1</td></tr>' in html
    # the steps around the divergence, the first divergent one highlighted
    assert '<tr class="first"><td>120</td>' in html


def test_sections_in_page_order(pages: dict[str, Path]) -> None:
    headings = re.findall(r"<h2>([^<]+)</h2>", pages["divergent"].read_text(encoding="utf-8"))
    assert headings == ["Diagnosis", "Loss per step", "Difference per step",
                        "Steps around the first divergence (loss)", "Runs that agree", "Metrics",
                        "Replay", "Runs", "Environment"]
    same = re.findall(r"<h2>([^<]+)</h2>", pages["same"].read_text(encoding="utf-8"))
    assert same == ["Loss per step", "Difference per step", "Metrics", "Runs", "Environment"]


def test_diagnosis_shown_when_there_is_one(pages: dict[str, Path]) -> None:
    html = pages["divergent"].read_text(encoding="utf-8")
    box = html.split('id="diagnosis">')[1].split("</div>")[0]
    # what, where and what it means, as the terminal and the JSON say it: not just a word
    assert '<span class="cause">compute</span>' in box
    assert "nondeterministic scatter_add_ in the backward pass" in box
    assert "<code>train.py:42 in forward</code>" in box
    section = html.split("<h2>Diagnosis</h2>")[1].split("<h2>")[0]
    assert "<b>model.embed</b> · op <code>scatter_add_</code> · backward · step 120" in section
    assert "scatter_add_cuda_" in section and "train.py:40" in section  # flagged ops
    sources = section.split('id="sources">')[1].split("</ol>")[0]
    assert sources.count("<li>") == 2
    assert "seeded from OS entropy (no seed given) at train.py:23" in sources  # source 2's detail
    assert "called from <code>train.py:88 in main</code>" in sources
    assert "(no seeding at all)" in section and "<b>Necessary components:</b> torch" in section
    assert 'id="diagnosis"' not in pages["same"].read_text(encoding="utf-8")


def test_a_reproducible_run_has_no_red_cause_box(tmp_path: Path) -> None:
    same = build_report(tmp_path / "none", [losses(20)] * 2, [0.9] * 2, cause="none")
    html = write_html(same, tmp_path / "none.html").read_text(encoding="utf-8")
    assert "Diagnosis" not in html and "cause none" not in html.lower()
    same.diagnosis = DiagnosisPart(ablation_note="the runs reproduce")
    html = write_html(same, tmp_path / "none.html").read_text(encoding="utf-8")
    assert 'class="diagnosis good"' in html and 'class="diagnosis bad"' not in html


def test_a_fingerprint_divergence_is_a_sentence_and_only_differing_rows_are_marked(
        tmp_path: Path) -> None:
    """rng.torch at step 1 reads as what it is; steps whose loss agrees (their gradients
    differ) are not painted as divergent, and say which signal differs."""
    folder = tmp_path / "fp"
    folder.mkdir()
    paths = []
    for run in (1, 2):
        w = TraceWriter(folder / f"run-{run}.jsonl")
        w.write(header_line({"target": "train:main", "run": run, "seed": 1,
                             "environment": environment(1)}))
        for s in range(1, 7):
            sig = {"rng.torch": f"{run:02x}" * 8 if s == 1 else "aa" * 8,
                   "loss": values.encode(np.float32(1.0 / s)),
                   "grads": f"{run}{s}" * 8}
            w.write({"step": s, "signals": sig})
        w.write({"end": {"status": "completed", "steps": 6}})
        paths.append(str(w.close()))
    traces = [load_trace(p) for p in paths]
    cmp = compare_traces(traces)
    assert cmp.divergence is not None and cmp.divergence.signal == "rng.torch"
    report = Report(target="train:main", args=[], seed=1, components=list(COMPONENTS), runs=2,
                    results=[RunResult(k, status="completed", steps=6, header=traces[k - 1].header,
                                       trace_path=paths[k - 1]) for k in (1, 2)],
                    comparison=cmp, cause="rng")
    html = write_html(report, tmp_path / "fp.html").read_text(encoding="utf-8")
    first = html.split('id="first-divergence">')[1].split("</p>")[0]
    assert "the torch RNG state going into step 1 differs" in first
    assert "|diff| —" not in first and "relative —" not in first
    assert "later step(s) differ too" not in first  # all five are in the table below
    table = html.split("Steps around the first divergence")[1].split("</table>")[0]
    rows = re.findall(r"<tr( class=\"[a-z]+\")?><td>(\d+)</td>", table)
    assert [(cls, int(step)) for cls, step in rows] == [(' class="first"', 1)] + [
        ("", k) for k in range(2, 7)]
    assert "<th>differs in</th>" in table and table.count("<td>grads</td>") == 5


def test_plots_mark_the_first_divergence(pages: dict[str, Path]) -> None:
    div, same = images(pages["divergent"]), images(pages["same"])
    assert pixels_near(div["loss-plot"], MARKER_COLOR) > 300
    assert pixels_near(div["loss-plot"], RUN_COLORS[0]) > 300  # run 1's curve
    assert pixels_near(div["difference-plot"], MARKER_COLOR) > 300
    assert pixels_near(same["loss-plot"], MARKER_COLOR) == 0
    assert "difference-plot" not in same  # no difference to draw
    assert "The loss is the same at every compared step." in pages["same"].read_text()


def test_written_atomically_and_readable(pages: dict[str, Path], tmp_path: Path) -> None:
    folder = pages["divergent"].parent
    assert not list(folder.glob(".*.tmp"))
    assert os.stat(pages["divergent"]).st_mode & 0o044  # an ordinary file others may read


# ---- loss curves from traces -------------------------------------------------------------------
def test_curve_read_back_from_a_long_trace_is_thinned(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "long.jsonl", 1, losses(20_000), 0.9)
    pts = read_curve(path, cap=500)
    assert len(pts) <= 501 and pts[-1][0] == 20_000
    assert pts[0] == (1, float(np.float32(losses(1)[0])))


# ---- in a real browser -------------------------------------------------------------------------
def screenshot(page: Path, out: Path) -> Image.Image:
    profile = out.parent / f"profile-{out.stem}"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--no-first-run", "--hide-scrollbars", f"--user-data-dir={profile}",
           f"--screenshot={out}", "--window-size=1100,2600", page.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert out.exists(), proc.stderr[-2000:]
    return Image.open(out).convert("RGB")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)")
def test_browser_renders_the_plot_and_the_divergence_marker(pages: dict[str, Path],
                                                           tmp_path: Path) -> None:
    shot = screenshot(pages["divergent"], tmp_path / "divergent.png")
    assert pixels_near(shot, MARKER_COLOR, tol=30) > 300  # the marker line, as drawn on screen
    assert pixels_near(shot, RUN_COLORS[0], tol=30) > 300  # run 1's loss curve
    assert pixels_near(shot, "#c62828", tol=20) > 1000  # the NOT REPRODUCIBLE badge
    control = screenshot(pages["same"], tmp_path / "same.png")
    assert pixels_near(control, MARKER_COLOR, tol=30) == 0
    assert pixels_near(control, RUN_COLORS[0], tol=30) > 300


# ---- through the command line ------------------------------------------------------------------
@pytest.fixture(params=BOTH)
def three_runs(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Report, str, Path]:
    """tiny.py --seed 5 --runs 3 with a difference planted in run 2 at step 7: the report,
    the summary as printed and the page as ``--report`` writes it."""
    report = replayed_or_live(request.param, "tiny_three_runs", tmp_path)
    page = tmp_path / "report.html"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        html_report(report, str(page), None)
    return report, terminal(report) + out.getvalue(), page


def test_cli_report_with_three_runs(three_runs: tuple[Report, str, Path]) -> None:
    report, stdout, page = three_runs
    r = report.to_dict()
    assert r["exit_code"] == 1, stdout
    assert r["identical_groups"] == [[1, 3], [2]]
    assert r["first_divergent_step"] == 7
    assert "Bit-identical groups: {1, 3}  {2}" in stdout
    assert f"report: {page}" in stdout
    html = page.read_text(encoding="utf-8")
    assert "<li>runs 1, 3</li><li>run 2</li>" in html
    assert pixels_near(images(page)["loss-plot"], MARKER_COLOR) > 300


def test_cli_report_without_matplotlib_is_exit_2_before_any_run(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "matplotlib"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    env = cli_env()
    env["PYTHONPATH"] = os.pathsep.join([str(shadow.parent), env["PYTHONPATH"]])
    proc = subprocess.run(
        [sys.executable, "-m", "repro_check", "tiny:main", "--report", str(tmp_path / "r.html"),
         "--trace-dir", str(tmp_path / "traces")],
        cwd=FIXTURES, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "repro-check: error: --report needs matplotlib, which is not installed "
        "(pip install 'torch-repro-check[report]')"]
    assert not (tmp_path / "traces").exists() and not (tmp_path / "r.html").exists()


def test_a_divergence_at_step_1_is_drawn_clear_of_the_axis(tmp_path: Path) -> None:
    report = build_report(tmp_path / "s1", [losses(900), losses(900, diverge_at=1)], [0.9, 0.8])
    page = write_html(report, tmp_path / "s1.html")
    for name, img in images(page).items():
        arr = np.asarray(img, dtype=int)
        magenta = (np.abs(arr - [255, 0, 255]) <= 40).all(axis=2).sum(axis=0)
        dark = (arr < 80).all(axis=2).sum(axis=0)  # the y axis: a long dark vertical line
        marker = int(np.nonzero(magenta > 100)[0].min())
        axis = int(np.nonzero(dark > 100)[0].min())
        assert marker - axis >= 6, (name, marker, axis)


@pytest.mark.slow
def test_diff_and_diagnose_write_the_report(golden: Golden, verify_other_seed: Any,
                                                        tmp_path: Path) -> None:
    """diff and diagnose take --report as check does, each page with its own section (verify's
    page: tests/gate/test_gate.py::test_verify_writes_the_html_report). diff compares the shared
    API record and verify (tests/api_runs.py); diagnose skips the localization (its re-runs add
    nothing to the page's diagnosis box, whose other parts the pages above draw)."""
    trace = verify_other_seed.results[-1].trace_path  # run 1 is the golden
    page = tmp_path / "diff.html"
    res = run_cli("diff", str(golden.path), trace, "--report", str(page), tmp=tmp_path / "diff",
                  traces=False)
    assert res.code == 1, res.stdout + res.stderr
    assert "<h2>Traces compared</h2>" in page.read_text(encoding="utf-8")
    page = tmp_path / "diagnose.html"
    res = run_cli("diagnose", "tiny.py:main", "--seed", "3", "--max-steps", "5", "--no-ablation",
                  "--no-localize", "--max-sources", "0", "--report", str(page), "--",
                  "--diverge-at", "3", tmp=tmp_path / "diagnose")
    assert res.code == 1, res.stdout + res.stderr
    html = page.read_text(encoding="utf-8")
    box = html.split('id="diagnosis">')[1].split("</div>")[0]
    assert res.report["cause"] in box and html_escape(res.report["cause_detail"], quote=True) in html
    assert "Ops PyTorch reports as nondeterministic" in html
