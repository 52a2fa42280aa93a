"""Metrics a script never returns: what it prints (the default rule, ``--metric NAME=REGEX``,
``metric`` in ``[tool.repro-check]``) and what it logs to wandb and mlflow; and a check that
compared no metric saying so (``metrics_compared``).

The scanner, the rules, the import hooks and the reports are tested in this process; the runs
(tests at the end) use the training-script fixtures in fixtures/metrics/, one check serving
several assertions.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from io import StringIO
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

import repro_check
from repro_check.child.observe import metric_hooks
from repro_check.cli import parsers
from repro_check.cli.plan import options_for
from repro_check.compare import printed
from repro_check.compare.steps import Comparison, Policy
from repro_check.config import load
from repro_check.errors import UsageError
from repro_check.gate.golden import header_settings
from repro_check.report import gate as gate_render
from repro_check.report import html
from repro_check.report.model import GatePart, Report
from repro_check.report.terminal import print_summary
from repro_check.run.options import RunOptions
from repro_check.run.replay import replay_line
from repro_check.run.runner import RunResult
from repro_check.trace import values
from repro_check.trace.values import Tolerance

from ..conftest import FIXTURES, ROOT, CliResult, cli_env, run_cli

METRICS = FIXTURES / "metrics"
MNIST_STYLE = str(METRICS / "mnist_style.py")
PCT = r"\((\d+)%\)"


def scan(*chunks: bytes | str, rules: tuple[tuple[str, str], ...] = ()) -> dict[str, Any]:
    s = printed.Scanner(rules)
    for c in chunks:
        s.add(c.encode() if isinstance(c, str) else c)
    return s.finish()


def texts(found: dict[str, Any]) -> dict[str, str]:
    return {name: enc["text"] for name, enc in found.items()}


# ---- the default rule --------------------------------------------------------------------------
def test_the_examples_prints_are_picked() -> None:
    found = scan(
        "Train Epoch: 1 [0/60000 (0%)]\tLoss: 2.305\n",
        "\nTest set: Average loss: 0.0345, Accuracy: 9876/10000 (99%)\n",
        "Accurecy: 0.9501\n",  # the reproducibility write-up's spelling
        "| end of epoch   1 | time: 20.11s | valid loss  5.62 | valid ppl   275.85\n",
        " * Acc@1 76.130 Acc@5 92.862\n",
        "{'loss': '0.6931', 'grad_norm': '1.2', 'learning_rate': 5e-05, 'epoch': 1.0}\n",
        "{'train_runtime': 1.2, 'train_loss': 0.69, 'epoch': 1.0}\n",
        "Epoch 0: 100%|###| 4/4 [00:00<00:00, 50.21it/s, v_num=0, train_loss=0.693]\r",
        "val_acc = nan; F1: 1e-3. top1 acc 3\n",
        "bleu: 31.2",  # the last line, without its newline
    )
    assert texts(found) == {
        "printed:loss": "0.6931", "printed:average_loss": "0.0345",
        "printed:accuracy": "9876/10000", "printed:accurecy": "0.9501",
        "printed:valid_loss": "5.62", "printed:valid_ppl": "275.85", "printed:acc@1": "76.130",
        "printed:acc@5": "92.862", "printed:train_loss": "0.693", "printed:val_acc": "nan",
        "printed:f1": "1e-3", "printed:top1_acc": "3", "printed:bleu": "31.2",
    }
    assert found["printed:accuracy"]["value"] == 0.9876
    assert found["printed:val_acc"]["value"] == "nan" and found["printed:top1_acc"]["value"] == 3


def test_an_error_rate_is_picked_after_a_prefix_only() -> None:
    """``test error: 0.08`` (pytorch/examples' forward-forward MNIST) is a metric; a log line's
    ``error 404`` or ``RuntimeError: 3`` is not."""
    found = scan("train error: 0.0712\n", "Top-1 error 23.9\n", "HTTP error 404\n",
                 "RuntimeError: 3 workers died\n", "error: 1 file left\n", "test error: 0.08\n")
    assert texts(found) == {"printed:train_error": "0.0712", "printed:top-1_error": "23.9",
                            "printed:test_error": "0.08"}


def test_a_value_without_a_digit() -> None:
    assert texts(scan("loss: nan\n", "ACC: Inf\n")) == {"printed:loss": "nan", "printed:acc": "Inf"}


def test_what_is_not_a_metric_is_left() -> None:
    found = scan("my_loss: 4 interval_acc=3 lossy: 3 loss 2.5s Accuracy: high\n"
                 "time: 20.1 ms/batch 11.5 learning rate: 0.1 loss of 3x\n")
    assert found == {}


def test_the_last_occurrence_wins_in_the_order_names_first_appeared() -> None:
    found = scan("loss: 3\nacc: 0.1\nloss: 2\n", "loss: 1.50\n")
    assert list(found) == ["printed:loss", "printed:acc"]
    assert texts(found)["printed:loss"] == "1.50"


def test_chunks_may_split_anywhere() -> None:
    text = ("Train Epoch: 2 [128/256 (50%)]\tLoss: 0.690556\n\nTest set: Average loss: 0.6552, "
            "Accuracy: 12818/20000 (64%)\n").encode()
    whole = scan(text)
    assert scan(*[text[i:i + 1] for i in range(len(text))]) == whole
    assert scan(text[:50], text[50:]) == whole and len(whole) == 3


def test_a_very_long_line_is_scanned_in_pieces() -> None:
    long_line = b"x " * (printed.MAX_LINE) + b"loss: 0.25 " + b"y" * 100 + b" acc: 0.5"
    found = scan(*[long_line[i:i + 4096] for i in range(0, len(long_line), 4096)])
    assert texts(found) == {"printed:loss": "0.25", "printed:acc": "0.5"}


def test_every_name_has_a_keyword_of_the_quick_test() -> None:
    for base in printed.BASES:
        assert any(k.decode() in base for k in printed.KEYWORDS), base


# ---- values: the text as printed ---------------------------------------------------------------
def test_printed_values_are_compared_on_their_text() -> None:
    a, b, c = printed.encode("0.50"), printed.encode("0.50"), printed.encode("0.5")
    assert a is not None and b is not None and c is not None
    policy = Policy()
    assert policy.judge("metric:printed:acc", a, b) == "exact"
    assert policy.judge("metric:printed:acc", a, c) is None  # same number, other text
    near = Policy(per_name={"metric:printed:acc": Tolerance(atol=0.01)})
    assert near.judge("metric:printed:acc", a, printed.encode("0.505")) == "tolerance"
    assert values.to_float(printed.encode("9876/10000")) == 0.9876  # type: ignore[arg-type]
    assert values.readable(printed.encode("9876/10000")) == "0.9876"
    long = printed.encode("0." + "1" * 40)
    assert long is not None and len(long["bits"]) == 64 and values.is_valid(long)
    assert all(values.is_valid(printed.encode(t)) for t in ("1", "-2.5e-3", "nan", "3/4", "inf"))
    assert printed.encode("abc") is None and math.isnan(printed.number_of("1/0") or 0.0)


# ---- --metric rules ----------------------------------------------------------------------------
def test_a_rule_takes_its_value_group_or_its_first_group() -> None:
    found = scan("BLEU = 27.3, chrF2 = 55.1\n", "Acc@1 (val) 76.1\n", "steps done: many\n",
                 rules=(("bleu", r"BLEU = (\S+),"), ("top1", r"Acc@1 \((\w+)\) (?P<value>\S+)"),
                        ("steps", r"steps done: (\S+)")))
    assert texts(found) == {"printed:bleu": "27.3", "printed:top1": "76.1"}  # "many": no number


def test_a_rule_replaces_the_default_for_its_name_and_stays_in_its_line() -> None:
    found = scan("loss: 1.0 (smoothed 0.9)\nloss\n0.5\n",
                 rules=(("loss", r"smoothed ([\d.]+)"), ("split", r"loss\s+([\d.]+)")))
    assert texts(found) == {"printed:loss": "0.9"}  # "loss\n0.5" is two lines


@pytest.mark.parametrize("text, why", [
    ("accuracy", "expected NAME=REGEX"),
    ("acc=(", "does not compile"),
    ("acc=\\d+", "needs a group"),
    ("bad name=(\\d)", "invalid metric name"),
    ("acc=", "non-empty"),
])
def test_bad_rules_are_one_line(text: str, why: str) -> None:
    with pytest.raises(UsageError, match=why):
        printed.parse_flag(text)


def test_rules_from_python_and_their_order() -> None:
    assert RunOptions("t.py", printed_metrics={"a": "a (\\d)"}).printed_metrics == (("a", "a (\\d)"),)
    opts = RunOptions("t.py", printed_metrics=["a=x(\\d)", ("b", "y(\\d)"), "a=z(\\d)"])
    assert opts.printed_metrics == (("b", "y(\\d)"), ("a", "z(\\d)"))
    with pytest.raises(UsageError, match="printed_metrics: the regex of metric 'a'"):
        RunOptions("t.py", printed_metrics={"a": "a"})
    line = replay_line(opts)
    assert "--metric 'b=y(\\d)' --metric 'a=z(\\d)'" in line


def test_config_rules_and_flags_over_them(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent("""\
        [tool.repro-check]
        metric = { pct = '\\((\\d+)%\\)', lr = 'lr (\\S+)' }
        targets = [{ target = "b.py", metric = ["steps=(\\\\d+) steps"] }]
        """))
    cfg = load(start=tmp_path)
    ns = parsers.build_parser().parse_args(["a.py", "--metric", "lr=LR=(\\S+)"])
    opts = options_for(ns, cfg, "a.py", None, None)
    assert opts.printed_metrics == (("pct", r"\((\d+)%\)"), ("lr", r"LR=(\S+)"))
    entry = cfg.entry("b.py")
    assert options_for(ns, cfg, "b.py", entry, None).printed_metrics == (
        ("steps", r"(\d+) steps"), ("lr", r"LR=(\S+)"))
    for bad, why in (("metric = 3", "expected a table"), ("metric = { a = 'a' }", "needs a group"),
                     ("metric = ['a']", "expected NAME=REGEX")):
        (tmp_path / "pyproject.toml").write_text(f"[tool.repro-check]\n{bad}\n")
        with pytest.raises(UsageError, match=rf"\[tool.repro-check\] metric: .*{why}"):
            load(start=tmp_path)


def test_verify_takes_no_rule_from_the_golden() -> None:
    """A regex from a file is never run (see tests/gate): only the user's rules apply."""
    header = {"target": "t.py", "args": [], "seed": 1, "components": ["torch"],
              "printed_metrics": [["pct", r"\((\d+)%\)"], ["lr", "lr (\\S+)"]]}
    recorded = header_settings(header, "golden.json")
    opts = RunOptions(printed_metrics={"lr": "LR (\\S+)"}).inherit(recorded)
    assert opts.printed_metrics == (("lr", "LR (\\S+)"),)
    with pytest.raises(Exception, match="malformed printed_metrics"):
        header_settings({**header, "printed_metrics": [["x"]]}, "golden.json")


# ---- no metric compared ------------------------------------------------------------------------
def report_of(metrics: list[dict[str, Any]], gate: GatePart | None = None) -> Report:
    cmp = Comparison(len(metrics))
    for k, m in enumerate(metrics, 1):
        for s in (1, 2, 3):
            cmp.add_step(k, s, {"loss": values.encode(np.float32(1.0 / s))})
        cmp.end(k, 3)
        cmp.set_metrics(k, m)
    results = [RunResult(k, status="completed", returncode=0, steps=3) for k in (1, 2)]
    return Report(target="t.py", args=[], seed=1, components=["torch"], runs=len(metrics),
                  results=results, comparison=cmp.result(), gate=gate)


def summary_text(report: Report, render: Any = print_summary) -> str:
    buf = StringIO()
    render(report, Console(file=buf, width=200, color_system=None, highlight=False))
    return buf.getvalue()


def test_a_check_without_metrics_says_so() -> None:
    report = report_of([{}, {}])
    text = summary_text(report)
    assert "All 3 steps agree; no metric was compared: return a number" in text
    assert "--metric NAME=REGEX" in text and "metric(s) agree" not in text
    assert report.to_dict()["metrics_compared"] == 0 and report.exit_code == 0
    gated = report_of([{}, {}], GatePart("verify", ["golden", "this run"], golden="g.json"))
    assert "no metric was compared" in summary_text(gated, gate_render.print_summary)
    assert "no metric was compared" in html.render_html(report)


def test_the_count_of_metrics_compared() -> None:
    acc = printed.encode("0.75")
    same = report_of([{"printed:acc": acc, "loss": values.encode(0.5)}] * 2)
    assert same.to_dict()["metrics_compared"] == 2
    assert "All 3 steps and 2 metric(s) agree." in summary_text(same)
    one_sided = report_of([{"printed:acc": acc}, {}])
    d = one_sided.to_dict()
    assert d["metrics_compared"] == 1 and d["divergent_signal"] == "metric:printed:acc"
    assert not one_sided.reproducible
    single = Report(target="t.py", args=[], seed=1, components=[], runs=1,
                    results=[RunResult(1, status="completed")], comparison=Comparison(1).result())
    assert single.to_dict()["metrics_compared"] == 0


# ---- hooks on first import ---------------------------------------------------------------------
class FakeRecorder:
    def __init__(self) -> None:
        self.metrics: dict[str, Any] = {}
        self.sources: dict[str, str] = {}
        self.events: list[dict[str, Any]] = []

    def metric(self, name: str, value: Any, source: str = "log_metric") -> None:
        self.metrics[name] = values.encode(value)
        self.sources[name] = source

    def warn(self, text: str) -> None:
        self.events.append({"warning": text})

    def emit(self, event: dict[str, Any]) -> None:
        self.events.append(event)


def test_a_module_is_patched_when_imported_and_keeps_its_loader(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "rc_fake_logger.py").write_text("def log(x):\n    return x * 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[Any] = []
    finder = metric_hooks.PatchOnImport({"rc_fake_logger": seen.append}).install()
    try:
        assert "rc_fake_logger" not in sys.modules and seen == []
        import rc_fake_logger  # type: ignore[import-not-found]

        assert seen == [rc_fake_logger]
        assert type(rc_fake_logger.__loader__).__name__ == "SourceFileLoader"
        assert rc_fake_logger.__spec__.loader is rc_fake_logger.__loader__
    finally:
        finder.uninstall()
        sys.modules.pop("rc_fake_logger", None)
    again = metric_hooks.PatchOnImport({"json": seen.append}).install()  # already imported
    again.uninstall()
    assert seen[-1] is json


def test_wandb_and_mlflow_calls_become_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(METRICS / "loggers"))
    rec = FakeRecorder()
    hooks = metric_hooks.install(rec)
    try:
        import mlflow  # the stand-ins in fixtures/metrics/loggers
        import wandb

        with pytest.raises(RuntimeError):
            wandb.log({"early": 1})
        run = wandb.init()
        wandb.log({"train/loss": 0.5, "img": object(), "nested": {"acc": 0.75}}, step=1)
        run.log(data={"_runtime": 3.0, "eval_samples_per_second": 9.0, "ok": True})
        mlflow.log_metric("loss", 0.25, step=2)
        mlflow.log_metric(key="k", value=np.float32(0.5))
        mlflow.log_metrics({"a": 1, "epoch_time": 2.0, "text": "x"})
        # timing values are recorded too: the comparison lists them as not compared
        assert set(rec.metrics) == {"wandb:train/loss", "wandb:nested.acc", "wandb:ok",
                                    "wandb:_runtime", "wandb:eval_samples_per_second",
                                    "mlflow:loss", "mlflow:k", "mlflow:a", "mlflow:epoch_time"}
        assert rec.sources["wandb:ok"] == "wandb" and rec.sources["mlflow:k"] == "mlflow"
        assert run.history[0]["train/loss"] == 0.5 and mlflow.logged[0] == ("loss", 0.25, 2)
    finally:
        hooks.uninstall()
        for name in ("wandb", "mlflow"):
            sys.modules.pop(name, None)
    assert not getattr(wandb.Run.log, "__repro_check_hook__", False)


def test_a_hook_that_does_not_fit_is_a_warning(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    (tmp_path / "mlflow.py").write_text("log_metric = 3\n")  # nothing to wrap: left alone
    (tmp_path / "wandb.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))

    def unknown_version(module: Any, sink: Any) -> list[Any]:
        raise AttributeError("module 'wandb' has no attribute 'log'")

    monkeypatch.setitem(metric_hooks.HOOKS, "wandb", unknown_version)
    rec = FakeRecorder()
    hooks = metric_hooks.install(rec)
    try:
        import mlflow
        import wandb  # noqa: F401

        assert mlflow.log_metric == 3
    finally:
        hooks.uninstall()
        for name in ("wandb", "mlflow"):
            sys.modules.pop(name, None)
    assert [e["warning"] for e in rec.events] == [
        "metrics logged through wandb are not recorded: AttributeError: module 'wandb' has no "
        "attribute 'log'"]


def test_installing_the_hooks_imports_none_of_them() -> None:
    code = ("import sys; from repro_check.child.observe import metric_hooks as h; "
            "before = set(sys.modules); h.install(None); "
            "print(sorted(m for m in set(sys.modules) - before "
            "if m.split('.')[0] in ('torch', 'lightning', 'pytorch_lightning', 'transformers', "
            "'wandb', 'mlflow', 'tensorboard')))")
    out = subprocess.run([sys.executable, "-c", code], env=cli_env(), capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# ---- runs of training scripts ------------------------------------------------------------------
def trace_lines(path: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def argparse_check(tmp_path_factory: pytest.TempPathFactory) -> CliResult:
    """One check of the argparse script, two epochs: rules from pyproject.toml and --metric."""
    tmp = tmp_path_factory.mktemp("argparse")
    (tmp / "pyproject.toml").write_text(
        f"[tool.repro-check]\nmetric = {{ pct = '{PCT}' }}\n")
    return run_cli(MNIST_STYLE, "--metric", r"epoch=Train Epoch: (\d+)",
                   "--metric", r"bleu=BLEU = (\S+)", "--", "--epochs", "2",
                   tmp=tmp / "out", cwd=tmp)


def test_an_argparse_script_that_prints_its_accuracy(argparse_check: CliResult) -> None:
    res = argparse_check
    r = res.report
    assert res.code == 0 and r is not None, res.stdout + res.stderr
    names = {"printed:loss", "printed:average_loss", "printed:accuracy", "printed:pct",
             "printed:epoch"}
    assert set(r["metrics"][0]) == names and r["metrics"][0] == r["metrics"][1]
    assert r["metrics_compared"] == 5
    # a rule that matched nothing is said, not dropped silently
    assert [w for w in r["warnings"] if w.startswith("--metric bleu: the regex matched no line")]
    assert 0 < r["metrics"][0]["printed:accuracy"] < 1 and r["metrics"][0]["printed:epoch"] == 2
    assert f"All {r['steps'][0]} steps and 5 metric(s) agree." in res.stdout
    lines = trace_lines(r["run_results"][0]["trace"])
    assert lines[0]["header"]["printed_metrics"] == [["pct", PCT], ["epoch", r"Train Epoch: (\d+)"],
                                                     ["bleu", r"BLEU = (\S+)"]]
    assert list(lines[-2]) == ["metrics"] and list(lines[-1]) == ["end"]  # written by repro-check
    acc = lines[-2]["metrics"]["printed:accuracy"]
    assert acc["dtype"] == "printed" and "/" in acc["text"] and acc["text"].endswith("/20000")
    # the traces compare as well on their own, printed metrics included
    diffed = repro_check.diff(r["run_results"][0]["trace"], r["run_results"][1]["trace"])
    assert diffed.reproducible and diffed.to_dict()["metrics_compared"] == 5


def test_a_printed_accuracy_that_differs_alone_is_not_reproducible(argparse_check: CliResult,
                                                                    tmp_path: Path) -> None:
    """The runs of fixtures/metrics/eval_from_clock.py (an evaluation subset taken from the
    clock) as their traces show it: the argparse check's traces, with run 2's printed accuracy
    changed as another subset changes it. Every step agrees; the printed metric parts them, and
    the cause says so, and the check's replay line keeps its --metric rules."""
    r = argparse_check.report
    assert r is not None, argparse_check.stdout + argparse_check.stderr
    first, second = (Path(run["trace"]) for run in r["run_results"])
    lines = trace_lines(str(second))
    assert lines[-2]["metrics"]["printed:accuracy"] == trace_lines(str(first))[-2]["metrics"][
        "printed:accuracy"]  # the same text in both runs, until changed here
    other = printed.encode("9999/12345")
    assert other is not None
    lines[-2]["metrics"]["printed:accuracy"] = other
    changed = tmp_path / "run-2.jsonl"
    changed.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = repro_check.diff(first, changed)
    d = report.to_dict()
    assert report.exit_code == 1 and not report.reproducible
    assert d["first_divergent_step"] is None and d["steps"][0] == d["steps_compared"] > 0
    differing = {m["signal"] for m in d["metric_divergences"]}
    assert "metric:printed:accuracy" in differing and d["divergent_signal"] in differing
    assert d["cause"] == "metrics" and "NOT REPRODUCIBLE" in summary_text(report)
    # the replay line of such a check (verdict.run_check: replay_line of the options the command
    # line made) keeps its --metric rule
    clock = str(METRICS / "eval_from_clock.py")
    ns = parsers.build_parser().parse_args([clock, "--metric", f"pct={PCT}"])
    replay = replay_line(options_for(ns, load(start=tmp_path), clock, None, None), runs=2)
    assert "--metric" in replay and f"pct={PCT}" in replay, replay


@pytest.mark.slow
def test_a_run_stopped_early_compares_no_printed_metric(tmp_path: Path) -> None:
    res = run_cli(MNIST_STYLE, "--max-steps", "2", tmp=tmp_path)
    r = res.report
    assert res.code == 0 and r is not None, res.stdout + res.stderr
    assert r["metrics"] == [{}, {}] and r["metrics_compared"] == 0
    assert "All 2 steps agree; no metric was compared:" in " ".join(res.stdout.split())


@pytest.mark.slow
def test_wandb_and_mlflow_logs_are_compared(tmp_path: Path) -> None:
    res = run_cli(str(METRICS / "loggers" / "log_to_trackers.py"), tmp=tmp_path)
    r = res.report
    assert res.code == 0 and r is not None, res.stdout + res.stderr
    assert set(r["metrics"][0]) == {"wandb:train/loss", "wandb:eval.mse", "mlflow:loss",
                                    "mlflow:final_loss", "mlflow:steps", "wandb:_runtime",
                                    "mlflow:epoch_time"}
    assert r["metrics_compared"] == 5  # the timing values are shown, listed, not compared
    assert sorted(r["metrics_skipped"]) == ["mlflow:epoch_time", "wandb:_runtime"]
    assert "Not compared, as timing or memory figures: " in " ".join(res.stdout.split())


# ---- what the summary says when a metric is missing ------------------------------------------
def test_runs_cut_by_max_steps_say_their_metrics_were_not_reached() -> None:
    report = report_of([{}, {}])
    for r in report.results:
        r.status = "stopped"
    report.results[0].held_metrics = ["accuracy"]
    text = " ".join(summary_text(report).split())
    assert "no metric was compared: the runs were stopped by --max-steps before ending on their own" \
        in text
    assert "the metrics recorded before the cut (accuracy) are not final" in text
    assert "return a number" not in text  # not the hint for a target that records none
    report.results[0].held_metrics = []
    assert "before recording any metric" in " ".join(summary_text(report).split())


def test_a_record_left_out_makes_the_check_incomplete() -> None:
    report = report_of([{"acc": values.encode(0.5)}] * 2)
    assert report.reproducible
    report.results[1].incomplete = ["a line the run wrote was dropped (over the limit)"]
    text = " ".join(summary_text(report).split())
    d = report.to_dict()
    assert not report.reproducible and report.exit_code == 1 and d["reproducible"] is False
    assert report.verdict.label == "INCOMPLETE" and "INCOMPLETE" in text
    assert d["incomplete"] == ["run 2: a line the run wrote was dropped (over the limit)"]
    assert "The comparison is incomplete: a line the run wrote was dropped" in text


def test_a_metric_rule_that_matched_nothing_is_said() -> None:
    rules = (("bleu", r"BLEU = (\S+)"), ("acc", r"acc (\S+)"))
    found = [{"printed:acc": printed.encode("1")}, {"printed:acc": printed.encode("1")}]
    said = printed.unmatched(rules, found)
    assert len(said) == 1 and said[0].startswith("--metric bleu: the regex matched no line")
    assert printed.unmatched(rules, []) == []  # no run ran to its end: nothing to say
    # matched in one run only: a difference, the check fails
    one_sided = report_of([{"printed:bleu": printed.encode("27.3")}, {}])
    assert not one_sided.reproducible and one_sided.divergent_signal == "metric:printed:bleu"


def test_a_metric_that_differs_while_every_step_agrees_is_said_apart() -> None:
    report = report_of([{"acc": values.encode(0.5)}, {"acc": values.encode(0.75)}])
    text = " ".join(summary_text(report).split())
    assert "All 3 steps agree: the training is reproducible. Only final metrics differ: acc." in text


def test_numbers_the_script_writes_with_json_dump_are_metrics(tmp_path: Path) -> None:
    """A final evaluation written only to ``results.json`` is compared (an accuracy that differs
    while every step agrees is NOT REPRODUCIBLE); its timing figure is set aside, its date is
    no number, and the seeded twin stays REPRODUCIBLE."""
    planted = run_cli("metrics/json_results.py", "--", "--eval-from-entropy",
                      tmp=tmp_path / "planted", cwd=tmp_path_copy(tmp_path, "planted"))
    report: Any = planted.report
    assert planted.code == 1 and report is not None, planted.stdout + planted.stderr
    assert report["divergent_signal"] == "metric:json:results.json/eval.accuracy"
    assert report["first_divergent_step"] is None and report["steps"] == [5, 5]
    twin = run_cli("metrics/json_results.py", tmp=tmp_path / "twin",
                   cwd=tmp_path_copy(tmp_path, "twin"))
    report = twin.report
    assert twin.code == 0 and report is not None, twin.stdout + twin.stderr
    assert "json:results.json/eval.accuracy" in report["metrics"][0]
    assert report["metrics_skipped"] == ["json:results.json/train_runtime"]


def tmp_path_copy(tmp_path: Path, name: str) -> Path:
    """A folder of its own with the fixture in it (the script writes results.json where it runs)."""
    import shutil

    folder = tmp_path / f"cwd-{name}" / "metrics"
    folder.mkdir(parents=True)
    shutil.copy(FIXTURES / "metrics" / "json_results.py", folder)
    return folder.parent
