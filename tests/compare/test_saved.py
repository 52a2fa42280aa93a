"""What the runs left, compared: saves paired by order (not path), tensors by key, a save one run
made only, runs cut short, the state at the end, and how the divergence joins the steps'."""

from __future__ import annotations

from typing import Any

from repro_check.compare import saved
from repro_check.compare.steps import Comparison
from repro_check.trace import signals
from repro_check.trace.protocol import SavedRecord, record_of


def record(order: int, path: str | None, tensors: list[list[Any]], kind: str = "file",
           step: int = 3, rank: int | None = None) -> SavedRecord:
    body = {"kind": kind, "order": order, "saver": "torch.save", "path": path, "step": step,
            "location": {"file": "train.py", "line": 40 + order, "function": "main"},
            "count": len(tensors), "tensors": tensors}
    raw: dict[str, Any] = {"info": {"saved": body}}
    if rank is not None:
        raw["rank"] = rank
    rec = record_of(raw)
    assert isinstance(rec, SavedRecord)
    return rec


W = ["0.weight", "float32", [2, 2], "aaaa"]
B = ["0.bias", "float32", [2], "bbbb"]


def compared(per_run: dict[int, list[SavedRecord]], complete: bool = True,
             runs: int = 2) -> saved.SavedResult:
    cmp = saved.SavedComparison()
    for run, recs in per_run.items():
        for r in recs:
            cmp.add(run, r.rank or 0, r)
    for run in range(1, runs + 1):
        cmp.end(run, complete if run == runs else True)
    return cmp.result(runs)


def test_saves_pair_by_order_whatever_their_paths_and_tensors_by_key() -> None:
    res = compared({
        1: [record(1, "/tmp/tmpa/ema.pt", [W, B]), record(2, "ckpt-101-1200.pt", [B])],
        2: [record(1, "/tmp/tmpb/ema.pt", [B, W]), record(2, "ckpt-202-1201.pt", [B])]})
    assert [f.agrees for f in res.files] == [True, True] and not res.divergences
    assert res.files[0].paths == ["/tmp/tmpa/ema.pt", "/tmp/tmpb/ema.pt"]
    assert res.tensors_compared == 3


def test_the_first_differing_key_is_named_with_the_save_step_and_line() -> None:
    other = [*W[:3], "cccc"]
    res = compared({1: [record(1, "out/a.pt", [B]), record(2, "/tmp/x/ema.pt", [W, B], step=30)],
                    2: [record(1, "out/a.pt", [B]), record(2, "/tmp/y/ema.pt", [other, B],
                                                              step=30)]})
    first = res.divergences[0]
    assert first.signal == signals.saved("ema.pt", "0.weight") == "saved:ema.pt:0.weight"
    assert (first.run, first.step, first.file, first.key, first.save_step) == (
        2, None, "ema.pt", "0.weight", 30)
    assert first.location is not None and first.location.site == "train.py:42"
    assert "torch.save at train.py:42, after step 30" in first.detail
    entry = res.files[1]
    assert not entry.agrees and entry.first_difference is not None
    assert (entry.first_difference.key, entry.first_difference.what) == ("0.weight", "bits")
    assert res.tensors_compared == 3  # every tensor both saves hold, the differing one too


def test_dtype_shape_missing_and_extra_keys_differ() -> None:
    cases = {
        "dtype": [W[0], "float16", W[2], W[3]], "shape": [W[0], W[1], [4], W[3]],
    }
    for what, changed in cases.items():
        res = compared({1: [record(1, "a.pt", [W])], 2: [record(1, "a.pt", [changed])]})
        assert res.files[0].first_difference.what == what  # type: ignore[union-attr]
    missing = compared({1: [record(1, "a.pt", [W, B])], 2: [record(1, "a.pt", [W])]})
    assert missing.files[0].first_difference.key == "0.bias"  # type: ignore[union-attr]
    extra = compared({1: [record(1, "a.pt", [W])], 2: [record(1, "a.pt", [W, B])]})
    assert extra.files[0].first_difference.what == "extra"  # type: ignore[union-attr]


def test_a_save_one_run_made_only_differs_unless_a_run_was_cut_short() -> None:
    per_run = {1: [record(1, "a.pt", [W])], 2: [record(1, "a.pt", [W]), record(2, "b.pt", [B])]}
    res = compared(per_run)
    assert res.divergences[0].signal == "saved:b.pt" and res.files[1].paths == [None, "b.pt"]
    assert res.files[1].first_difference.what == "not saved"  # type: ignore[union-attr]
    assert not compared(per_run, complete=False).divergences


def test_the_state_at_the_end_comes_after_the_saves_and_is_named_by_module() -> None:
    bn = ["model.1.running_mean", "float32", [8], "dddd"]
    res = compared({1: [record(0, None, [bn], kind="state", step=6)],
                    2: [record(0, None, [[*bn[:3], "eeee"]], kind="state", step=6)]})
    (d,) = res.divergences
    assert d.signal == "state:model.1.running_mean" and d.file is None and d.save_step == 6
    assert res.files[0].kind == "state" and res.files[0].name == "the modules' state at the end"


def test_ranks_pair_with_the_same_rank() -> None:
    res = compared({1: [record(1, "r.pt", [W], rank=0), record(1, "r.pt", [B], rank=1)],
                    2: [record(1, "r.pt", [W], rank=0), record(1, "r.pt", [W], rank=1)]})
    assert [f.rank for f in res.files] == [0, 1] and [f.agrees for f in res.files] == [True, False]
    assert res.divergences[0].detail.startswith("rank 1: ")


def test_merge_a_step_divergence_stays_first_a_metric_gives_way() -> None:
    diff = compared({1: [record(1, "a.pt", [W])], 2: [record(1, "a.pt", [[*W[:3], "ffff"]])]})
    steps = Comparison(2)
    for run in (1, 2):
        steps.add_step(run, 1, {"loss": {"dtype": "float32", "bits": "3f800000", "value": 1.0}})
        steps.end(run, 1)
    steps.set_metrics(1, {"acc": {"dtype": "float64", "bits": "0", "value": 0.0}})
    steps.set_metrics(2, {"acc": {"dtype": "float64", "bits": "1", "value": 5e-324}})
    merged = saved.merge(steps.result(), diff)
    assert not merged.reproducible and merged.divergent_signal == "saved:a.pt:0.weight"
    assert merged.first_divergent_step is None and merged.per_run[2] is diff.divergences[0]
    assert [d.signal for d in merged.metric_divergences] == ["metric:acc"]  # still listed

    stepped = Comparison(2)
    for run, bits in ((1, "3f800000"), (2, "3f800001")):
        stepped.add_step(run, 1, {"loss": {"dtype": "float32", "bits": bits, "value": 1.0}})
        stepped.end(run, 1)
    merged = saved.merge(stepped.result(), diff)
    assert (merged.first_divergent_step, merged.divergent_signal) == (1, "loss")
    agreeing = Comparison(2)
    assert saved.merge(agreeing.result(), compared({})).reproducible


# ---- whole checks of fixtures/saved, replayed from recorded runs (live in the slow tier) -------
import re  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from repro_check.report import ci  # noqa: E402
from repro_check.report.model import Report  # noqa: E402

from ..recorded import BOTH, replayed_or_live, terminal  # noqa: E402

EMA_SAVE_LINE = next(i for i, line in enumerate(
    (Path(__file__).resolve().parents[2] / "fixtures" / "saved" / "ema.py").read_text()
    .splitlines(), 1) if 'os.path.join(out, "ema.pt")' in line)


def check_of(name: str) -> Any:
    @pytest.fixture(scope="module", params=BOTH)
    def fixture(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                ) -> tuple[Report, dict[str, Any], str]:
        report = replayed_or_live(request.param, name, tmp_path_factory.mktemp(name))
        return report, report.to_dict(), terminal(report)
    return fixture


ema_entropy = check_of("saved_ema_entropy")
ema_twin = check_of("saved_ema_twin")
savers_differ = check_of("savers_differ")
savers_twin = check_of("savers_twin")
bn_perturbed = check_of("bn_perturbed")
bn_twin = check_of("bn_twin")


def test_an_ema_saved_from_a_decay_that_differs_is_not_reproducible_though_every_step_agrees(
        ema_entropy: tuple[Report, dict[str, Any], str]) -> None:
    report, js, text = ema_entropy
    assert report.exit_code == 1 and js["reproducible"] is False
    assert js["steps"] == [8, 8] and js["steps_compared"] == 8 and js["metrics_compared"] == 1
    assert (js["divergent_signal"], js["first_divergent_step"], js["cause"]) == (
        "saved:ema.pt:0.weight", None, "saved")
    div = js["divergence"]
    assert (div["file"], div["key"], div["save_step"], div["location"]["line"]) == (
        "ema.pt", "0.weight", 8, EMA_SAVE_LINE)
    ema, ckpt, state = js["saved"]
    assert (ema["saver"], ema["agrees"], ema["tensors"], ema["first_difference"]["what"]) == (
        "torch.save", False, 9, "bits")
    # the checkpoint named after the pid and the time, holding the time of the save, agrees
    assert ckpt["agrees"] is True and ckpt["paths"][0] != ckpt["paths"][1]
    assert state["kind"] == "state" and state["first_difference"]["key"] == "ema.0.weight"
    assert js["saved_tensors_compared"] == report.saved_tensors_compared == 9 + 9 + 18
    assert "All 8 steps agree, but what the runs left differs." in text
    assert "saved:ema.pt:0.weight" in text and f"ema.py:{EMA_SAVE_LINE}, after step 8" in text
    message = ci.failure_message(report) or ""
    assert "saved file ema.pt (after step 8) differs" in message and "0.weight" in message


def test_its_twin_with_a_constant_decay_stays_reproducible(
        ema_twin: tuple[Report, dict[str, Any], str]) -> None:
    report, js, text = ema_twin
    assert report.exit_code == 0 and js["divergent_signal"] is None and js["cause"] == "none"
    assert [f["agrees"] for f in js["saved"]] == [True, True, True]
    assert js["saved_tensors_compared"] == 36
    assert "What the runs left agrees: 2 saved file(s) and the modules' state at the end, " \
           "36 tensor(s) compared." in re.sub(r"\s+", " ", text)


SAVERS = [("numpy.save", "preds.npy", ""), ("numpy.savez", "arrays.npz", "preds"),
          ("torch.save", None, "0.weight"), ("pickle.dump", "weights.pkl", "0.weight"),
          ("torch.jit.save", "model.jit", "0.bias"),
          ("torch.save", "snapshot.pt", "weights.0.weight")]


def test_every_way_of_saving_is_compared_and_each_file_named(
        savers_differ: tuple[Report, dict[str, Any], str]) -> None:
    report, js, _ = savers_differ
    assert report.exit_code == 1 and js["steps_compared"] == 5
    assert js["divergent_signal"] == "saved:preds.npy" and js["cause"] == "saved"
    files = [f for f in js["saved"] if f["kind"] == "file"]
    got = [(f["saver"], f["path"] and Path(f["path"]).name, f["first_difference"]["key"] or "")
           for f in files]
    assert got == SAVERS and not any(f["agrees"] for f in files)


def test_every_way_of_saving_agrees_in_the_twin(
        savers_twin: tuple[Report, dict[str, Any], str]) -> None:
    report, js, _ = savers_twin
    assert report.exit_code == 0
    assert [(f["saver"], f["agrees"]) for f in js["saved"]] == [
        *((s, True) for s, _, _ in SAVERS), ("modules", True)]
    assert js["saved_tensors_compared"] == sum(f["tensors"] for f in js["saved"])


def test_a_batchnorm_buffer_that_differs_at_the_end_is_not_reproducible(
        bn_perturbed: tuple[Report, dict[str, Any], str]) -> None:
    report, js, text = bn_perturbed
    assert report.exit_code == 1 and js["steps_compared"] == 6
    assert (js["divergent_signal"], js["cause"]) == ("state:model.1.running_mean", "state")
    (state,) = js["saved"]  # nothing saved: the model, a local of main(), at its end
    assert state["kind"] == "state" and state["tensors"] == 9 and not state["agrees"]
    assert "the modules' state at the end" in text and "model.1.running_mean" in text


def test_its_twin_stays_reproducible(bn_twin: tuple[Report, dict[str, Any], str]) -> None:
    report, js, _ = bn_twin
    assert report.exit_code == 0 and js["saved"][0]["agrees"] is True
    assert js["saved_tensors_compared"] == 9


def test_the_html_report_names_the_saved_file_that_differs(
        ema_entropy: tuple[Report, dict[str, Any], str]) -> None:
    pytest.importorskip("matplotlib", reason="the HTML report needs the [report] extra")
    from repro_check.report.html import render_html

    page = render_html(ema_entropy[0])
    assert "saved:ema.pt:0.weight" in page and 'id="saved"' in page
    assert "saved file ema.pt (after step 8)" in page and "What the runs left differs" in page
