"""The HTML report: self-contained, plots drawn, the divergence marked, seen in a real browser."""

from __future__ import annotations

import base64
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from repro_check.trace import values
from repro_check.compare.steps import compare_traces
from repro_check.report.html import MARKER_COLOR, RUN_COLORS, read_curve, write_html
from repro_check.report.model import DiagnosisPart, Report
from repro_check.run.options import RunOptions
from repro_check.run.replay import check_runs, replay_line
from repro_check.run.runner import RunResult
from repro_check.child.seeding import COMPONENTS
from repro_check.trace.format import TraceWriter, header_line, load_trace

from ..conftest import FIXTURES, cli_env, run_cli

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


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("html")
    divergent = build_report(
        tmp / "divergent", [losses(300), losses(300, diverge_at=120), losses(300)],
        [0.9463, 0.9459, 0.9463], cause="nondeterministic scatter_add_ in the backward pass",
        diagnosis=DiagnosisPart(culprit="model.embed", culprit_op="scatter_add_"),
    )
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
    diagnosis = html.split('id="diagnosis">')[1].split("</div>")[0]
    assert "nondeterministic scatter_add_ in the backward pass" in diagnosis
    assert "<h3>culprit</h3><p>model.embed</p>" in diagnosis
    assert "<h3>culprit op</h3><p>scatter_add_</p>" in diagnosis
    assert 'id="diagnosis"' not in pages["same"].read_text(encoding="utf-8")


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
           f"--screenshot={out}", "--window-size=1100,1400", page.resolve().as_uri()]
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
def test_cli_report_with_three_runs(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    res = run_cli("tiny:main", "--seed", "5", "--runs", "3", "--report", str(page), "--",
                  "--diverge-at", "7", "--diverge-in-run", "2", tmp=tmp_path)
    assert res.code == 1, res.stdout + res.stderr
    assert res.report["identical_groups"] == [[1, 3], [2]]
    assert res.report["first_divergent_step"] == 7
    assert "Bit-identical groups: {1, 3}  {2}" in res.stdout
    assert f"report: {page}" in res.stdout
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
        "(pip install 'repro-check[report]')"]
    assert not (tmp_path / "traces").exists() and not (tmp_path / "r.html").exists()
