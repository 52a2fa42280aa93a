"""The stored traces of tests/data/recorded are what the code records now: each scenario is
checked for real again and compared with the replay of its stored traces (slow tier)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .recorded import DATA, PLACEHOLDER, ROOT, SCENARIOS, live, replay


def kinds(path: Path) -> set[str]:
    """The kinds of record a trace holds (a record's top-level key; an info record's keys too).
    A set: what runs in the target's other threads and processes (DataLoader workers) may
    arrive in another order each run."""
    out: set[str] = set()
    for line in path.read_text().splitlines():
        record = json.loads(line)
        kind = next(iter(record))
        if kind == "info":
            kind += ":" + ",".join(sorted(record["info"]))
        out.add(kind)
    return out


def test_every_scenario_has_its_stored_traces() -> None:
    for name, scenario in SCENARIOS.items():
        stored = sorted(p.name for p in (DATA / name).glob("run-*.jsonl"))
        runs = scenario.options.get("runs", 2)
        assert stored == sorted(f"run-{i}.jsonl" for i in range(1, runs + 1)), name
        for p in (DATA / name).glob("run-*.jsonl"):
            text = p.read_text()
            assert str(ROOT) not in text and PLACEHOLDER in text, p  # no machine's own path


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_fresh_check_agrees_with_the_replay_of_the_stored_traces(
        name: str, tmp_path: Path) -> None:
    fresh, stored = live(name, tmp_path / "live"), replay(name, tmp_path / "replayed")
    a, b = fresh.to_dict(), stored.to_dict()
    for key in ("reproducible", "exit_code", "first_divergent_step", "divergent_signal", "cause",
                "cause_location"):
        assert a[key] == b[key], (name, key, a[key], b[key])
    for r in fresh.results:
        assert r.trace_path is not None
        assert kinds(Path(r.trace_path)) == kinds(DATA / name / f"run-{r.index}.jsonl"), name
