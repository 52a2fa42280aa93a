"""SeedingWatch, in this process: each way a script undoes repro-check's seeding is reported once,
naming its component, a script that keeps the seeding gets no warning, and a script that seeds a
stream repro-check left alone (``--no-seed``, ``--without``) is reported with where its seed came
from (the clock, OS entropy, an unseeded stream).

The watch is set up as a run sets it up: the settings seeding applies are made here (seed,
cuDNN flags, deterministic algorithms, thread count) and handed over as ``applied``. Everything
the watch or the scenario changes in this process is put back afterwards.
"""

from __future__ import annotations

import os
import random
import select
import time
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from repro_check.child.seeding import clock  # noqa: E402
from repro_check.child import patches  # noqa: E402
from repro_check.child.observe.watch import SeedingWatch, WorkerWatch  # noqa: E402
from repro_check.compare.seeds import cross_run_notes, shared_field  # noqa: E402
from repro_check.trace.payloads import SeedOverride  # noqa: E402

SEED = 1234
THREADS = 1


@pytest.fixture()
def seeded() -> Iterator[dict[str, Any]]:
    """This process seeded as a run is; ``applied`` is what seeding reports it did."""
    saved = {
        "benchmark": torch.backends.cudnn.benchmark,
        "deterministic": torch.backends.cudnn.deterministic,
        "algorithms": torch.are_deterministic_algorithms_enabled(),
        "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "threads": torch.get_num_threads(),
        "torch_rng": torch.get_rng_state(),
        "python_rng": random.getstate(),
        "numpy_rng": np.random.get_state(),
    }
    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(THREADS)
    applied = {
        "python": SEED,
        "numpy": SEED,
        "torch": SEED,
        "cuda": SEED,
        "cudnn": {"benchmark": False, "deterministic": True},
        "deterministic_algorithms": {"enabled": True, "warn_only": False},
        "threads": THREADS,
    }
    try:
        yield applied
    finally:
        torch.backends.cudnn.benchmark = saved["benchmark"]
        torch.backends.cudnn.deterministic = saved["deterministic"]
        torch.use_deterministic_algorithms(saved["algorithms"], warn_only=saved["warn_only"])
        torch.set_num_threads(saved["threads"])
        torch.set_rng_state(saved["torch_rng"])
        random.setstate(saved["python_rng"])
        np.random.set_state(saved["numpy_rng"])
        patches.PATCHES.undo()  # install() wrapped the seeding calls: the originals come back


class Watched:
    def __init__(self, applied: dict[str, Any], seed: int | None = SEED) -> None:
        self.records: list[dict[str, Any]] = []
        self.watch = SeedingWatch(self.records.append, applied, seed).install()

    def check(self) -> list[dict[str, Any]]:
        self.watch.check()
        return self.records

    def only(self) -> dict[str, Any]:
        assert len(self.records) == 1, self.records
        return self.records[0]


def assert_names(record: dict[str, Any], component: str, key: str) -> None:
    assert record["component"] == component and record["key"] == key
    assert isinstance(record["warning"], str)
    assert f"overrides seeding component {component!r}" in record["warning"]


def train_a_little() -> float:
    """A few seeded steps that draw from every stream and keep the seeding as it is."""
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    noise = random.random() + float(np.random.rand())
    for _ in range(3):
        opt.zero_grad()
        loss = model(torch.randn(8, 4)).pow(2).mean() + noise
        loss.backward()
        opt.step()
    return float(loss.detach())


# ---- quiet ---------------------------------------------------------------------------------------
def test_quiet_on_a_script_that_keeps_the_seeding(seeded: dict[str, Any]) -> None:
    w = Watched(seeded)
    train_a_little()
    # reseeding with the seed repro-check set is no override
    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    torch.backends.cudnn.benchmark = False
    torch.set_num_threads(THREADS)
    train_a_little()
    assert w.check() == []


HERE = os.path.abspath(__file__)


def test_unseeded_run_reports_the_seeds_the_script_sets(seeded: dict[str, Any]) -> None:
    """--no-seed: settings are nobody's override, but every seed the script sets is reported."""
    w = Watched(seeded, seed=None)
    torch.backends.cudnn.benchmark = True
    torch.seed()
    random.seed()
    np.random.seed(7)
    records = w.check()
    assert [r["key"] for r in records] == ["torch.seed", "random.seed", "numpy.random.seed"]
    assert not any("overrides" in r["warning"] for r in records)
    assert [r["source"] for r in records[:2]] == ["entropy", "entropy"]
    assert records[2]["value"] == 7 and "seeds numpy's global generator itself" in \
        records[2]["warning"]
    assert all(r["where"].startswith(HERE + ":") for r in records)


def test_a_seed_drawn_from_an_unseeded_stream_says_so(seeded: dict[str, Any]) -> None:
    random.seed()  # as a fresh interpreter has it: from OS entropy
    w = Watched(seeded, seed=None)
    value = random.randint(0, 2**31 - 1)  # seed = random.randint(...), as scripts do
    torch.manual_seed(value)
    rec = w.only()
    assert rec["key"] == "torch.manual_seed" and rec["value"] == value
    assert rec["source"] == "unseeded python"
    assert "Python's random had been drawn from without a seed" in rec["warning"]
    assert str(value) not in rec["warning"]  # one line for every run, the values apart
    called_at = test_a_seed_drawn_from_an_unseeded_stream_says_so.__code__.co_firstlineno + 4
    assert rec["where"] == f"{HERE}:{called_at}"


def test_a_constant_seed_of_the_script_is_plain(seeded: dict[str, Any]) -> None:
    w = Watched(seeded, seed=None)
    torch.manual_seed(42)
    rec = w.only()
    assert "source" not in rec and "torch.manual_seed(42)" in rec["warning"]


def test_quiet_about_settings_that_were_not_applied(seeded: dict[str, Any]) -> None:
    applied = {k: v for k, v in seeded.items() if k not in ("cudnn", "threads", "python")}
    w = Watched(applied)
    torch.backends.cudnn.benchmark = True
    torch.set_num_threads(THREADS + 1)
    random.seed()
    rec = w.only()  # the seed call, as the script's own: no override
    assert rec["key"] == "random.seed" and "overrides" not in rec["warning"]


# ---- each override -------------------------------------------------------------------------------
def test_cudnn_benchmark_on(seeded: dict[str, Any]) -> None:
    w = Watched(seeded)
    train_a_little()
    assert w.check() == []
    torch.backends.cudnn.benchmark = True
    w.check()
    rec = w.only()
    assert_names(rec, "cudnn", "cudnn.benchmark")
    assert rec["value"] is True and "benchmark" in rec["warning"]
    # once a run, however often it is checked
    w.check()
    w.check()
    assert len(w.records) == 1


def test_cudnn_deterministic_off(seeded: dict[str, Any]) -> None:
    w = Watched(seeded)
    torch.backends.cudnn.deterministic = False
    w.check()
    assert_names(w.only(), "cudnn", "cudnn.deterministic")


def test_torch_seed_from_os_entropy(seeded: dict[str, Any]) -> None:
    w = Watched(seeded)
    value = torch.seed()
    # reported as the call happens, with the seed it drew
    rec = w.only()
    assert_names(rec, "torch", "torch.seed")
    assert value == torch.initial_seed()
    # a 64-bit seed beyond what JSON readers keep exactly is recorded as its decimal string
    assert rec["value"] in (value, str(value))
    # the seed it set is then expected: no second report for the same reseed
    train_a_little()
    w.check()
    assert len(w.records) == 1


def test_torch_manual_seed_from_the_clock(seeded: dict[str, Any]) -> None:
    w = Watched(seeded)
    torch.manual_seed(time.time_ns() % 2**63)
    rec = w.only()  # reported as the call happens
    assert_names(rec, "torch", "torch.manual_seed")
    assert rec["value"] == torch.initial_seed() and rec["value"] != SEED
    assert rec["source"] == "clock" and "from the clock" in rec["warning"]
    assert "current time in ns" in rec["warning"] and rec["where"].startswith(HERE + ":")
    w.check()  # the settings check knows the seed it set: no second report
    assert len(w.records) == 1


@pytest.mark.parametrize("make, unit", [
    (lambda: int(time.time()), "s"), (lambda: time.time(), "s"),
    (lambda: int(time.time() * 1000), "ms"), (lambda: int(time.time() * 1e6), "us"),
    (lambda: time.time_ns(), "ns"), (lambda: int(time.time()) - 3600, "s"),
])
def test_every_unit_of_the_clock_is_recognised(seeded: dict[str, Any], make: Any,
                                               unit: str) -> None:
    w = Watched(seeded, seed=None)
    random.seed(make())
    rec = w.only()
    assert rec["source"] == "clock" and f"current time in {unit}" in rec["warning"]


def test_seeds_that_are_not_the_clock() -> None:
    now = int(time.time())
    assert [clock.clock_unit(v) for v in (0, 42, 2**32 - 1, now - 3 * 86_400, "x", None,
                                          float("nan"))] == [None] * 7
    assert clock.clock_unit(np.int64(now)) == "s"


def test_set_num_threads(seeded: dict[str, Any]) -> None:
    w = Watched(seeded)
    torch.set_num_threads(THREADS + 1)
    w.check()
    rec = w.only()
    assert_names(rec, "threads", "set_num_threads")
    assert rec["value"] == torch.get_num_threads() == THREADS + 1


def test_use_deterministic_algorithms_off(seeded: dict[str, Any]) -> None:
    w = Watched(seeded)
    torch.use_deterministic_algorithms(False)
    w.check()
    rec = w.only()
    assert_names(rec, "deterministic_algorithms", "use_deterministic_algorithms")
    assert rec["value"] is False


def test_random_seed_without_a_seed(seeded: dict[str, Any]) -> None:
    w = Watched(seeded)
    random.seed()
    rec = w.only()  # reported as the call happens
    assert_names(rec, "python", "random.seed")
    assert rec["value"] is None and "OS entropy" in rec["warning"]
    # the call still reseeded: two draws after two entropy reseeds differ
    draws = []
    for _ in range(2):
        random.seed()  # once a call site, however often it runs
        draws.append(random.random())
    assert draws[0] != draws[1]
    assert len(w.records) == 2 and w.records[1]["where"] != rec["where"]


def test_random_seed_with_another_constant(seeded: dict[str, Any]) -> None:
    w = Watched(seeded)
    random.seed(SEED + 1)
    rec = w.only()
    assert_names(rec, "python", "random.seed")
    assert rec["value"] == SEED + 1
    # the generator got that seed
    expected = random.Random(SEED + 1).random()
    random.seed(SEED + 1)
    assert random.random() == expected


def test_numpy_global_seed(seeded: dict[str, Any]) -> None:
    w = Watched(seeded)
    np.random.seed()
    assert_names(w.only(), "numpy", "numpy.random.seed")


def test_each_override_is_reported_once_and_all_are_reported(seeded: dict[str, Any]) -> None:
    w = Watched(seeded)
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(int(time.time()))
    torch.set_num_threads(THREADS + 1)
    torch.use_deterministic_algorithms(False)
    random.seed()
    for _ in range(3):
        train_a_little()
        w.check()
    keys = [r["key"] for r in w.records]
    assert sorted(keys) == sorted({"cudnn.benchmark", "torch.manual_seed", "set_num_threads",
                                   "use_deterministic_algorithms", "random.seed"})


def test_records_are_json_safe(seeded: dict[str, Any]) -> None:
    import json

    w = Watched(seeded)
    random.seed(2**80)  # an integer larger than JSON readers keep exactly
    np.random.seed(np.arange(3, dtype=np.uint32))  # an array as the seed
    torch.backends.cudnn.benchmark = True
    w.check()
    assert len(w.records) == 3
    for rec in w.records:
        assert json.loads(json.dumps(rec, allow_nan=False)) == rec


def test_never_reports_from_a_forked_worker(seeded: dict[str, Any]) -> None:
    w = Watched(seeded)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a DataLoader worker forked from the run
        try:
            torch.backends.cudnn.benchmark = True
            random.seed()
            w.check()
            os.write(write, str(len(w.records)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as fh:
        ready, _, _ = select.select([fh], [], [], 60)  # a hung worker fails, never blocks
        seen_in_child = fh.read() if ready else "no answer"
    _, status = os.waitpid(pid, os.WNOHANG if not ready else 0)
    assert seen_in_child == "0"
    assert w.check() == []  # the worker's changes stay in the worker


#: what :func:`_init_worker` was called with
_INITS: list[int] = []


def _init_worker(worker_id: int) -> None:
    _INITS.append(worker_id)


def test_a_loaders_worker_init_fn_carries_the_watch_only_into_a_worker_it_starts(
        seeded: dict[str, Any]) -> None:
    """Every DataLoader's worker_init_fn is wrapped (a spawned worker gets the watch from it); the
    wrapper calls the script's function, is not wrapped again when a loader is rebuilt from
    another's, and a pickle made for anything but starting a worker carries no descriptor."""
    import pickle

    from torch.utils.data import DataLoader

    w = Watched(seeded)
    assert w.watch.page_fd is not None  # a file a spawned worker can map
    loader = DataLoader([1, 2], worker_init_fn=_init_worker)
    wrapped = loader.worker_init_fn
    assert isinstance(wrapped, WorkerWatch) and wrapped.user_fn is _init_worker
    assert isinstance(DataLoader([1]).worker_init_fn, WorkerWatch)  # none of the script's
    _INITS.clear()
    wrapped(3)
    assert _INITS == [3]
    assert DataLoader([1], worker_init_fn=wrapped).worker_init_fn is wrapped
    assert w.watch.spawn_carry() is None
    copy = pickle.loads(pickle.dumps(wrapped))
    assert copy.watch is None and copy.user_fn is _init_worker


# ---- across runs ---------------------------------------------------------------------------------
def test_a_reseed_that_differs_between_runs_is_called_out() -> None:
    def rec(value: Any, **more: Any) -> SeedOverride:
        parsed = SeedOverride.parse({"warning": "...", "component": "torch",
                                     "key": "torch.manual_seed", "value": value, **more})
        assert parsed is not None
        return parsed

    notes = cross_run_notes({1: [rec(111)], 2: [rec(222)]})
    assert len(notes) == 1
    assert "torch" in notes[0] and "run 1: 111" in notes[0] and "run 2: 222" in notes[0]
    clocked = cross_run_notes({1: [rec(1, where="t.py:3", source="clock")],
                               2: [rec(2, where="t.py:3")]})
    assert "at t.py:3" in clocked[0] and "from the clock" in clocked[0]
    # the same constant in every run is an override, but not a reason the runs differ
    assert cross_run_notes({1: [rec(7)], 2: [rec(7)]}) == []
    assert cross_run_notes({1: [rec(7)]}) == []


def test_a_coarse_clock_seed_is_named_from_the_runs_together() -> None:
    """The hour is a small number a constant can equal: only a value that differs between runs
    and is the hour in each is called the clock."""
    def rec(value: Any, fields: list[str] | None) -> SeedOverride:
        out = {"warning": "...", "component": "numpy", "key": "numpy.random.seed",
               "value": value, "where": "t.py:9"}
        parsed = SeedOverride.parse({**out, "clock_fields": fields} if fields is not None
                                    else out)
        assert parsed is not None
        return parsed

    notes = cross_run_notes({1: [rec(13, ["hour", "day of the month"])], 2: [rec(2, ["hour"])]})
    assert len(notes) == 1 and "from the clock (the seed is the hour of the time)" in notes[0]
    # equal to the hour in one run only: another value that differs, not called the clock
    notes = cross_run_notes({1: [rec(13, ["hour"])], 2: [rec(2, None)]})
    assert len(notes) == 1 and "from the clock (" not in notes[0]
    # a constant that happens to be the hour (or the year) in every run is no clock seed
    assert cross_run_notes({1: [rec(17, ["hour"])], 2: [rec(17, ["hour"])]}) == []


@pytest.mark.parametrize("read", [
    lambda d: d.hour, lambda d: d.minute, lambda d: d.second, lambda d: d.day, lambda d: d.month,
    lambda d: d.year, lambda d: d.weekday(),
    lambda d: d.hour * 60 + d.minute, lambda d: int(d.strftime("%Y%m%d")),
    lambda d: int(d.strftime("%Y%m%d%H%M")), lambda d: d.toordinal(),
    lambda d: d.timetuple().tm_yday,
])
def test_clock_fields_name_what_a_coarse_seed_was_read_from(read: Any) -> None:
    import datetime

    assert clock.clock_fields(read(datetime.datetime.now())) != []
    assert clock.clock_fields(time.localtime().tm_hour) != []
    assert clock.clock_fields(datetime.date.today().day) != []


def test_constant_seeds_are_never_a_clock_seed() -> None:
    """Whatever fields a constant equals in one run, it is the same in every run."""
    for value in (0, 1, 7, 42, 123, 1234, 2024, 2026, 31337, 20240101):
        fields = clock.clock_fields(value)
        assert shared_field([fields, fields], [value, value]) is None
    assert clock.clock_fields(4.5) == []
    assert clock.clock_fields(None) == [] and clock.clock_fields(True) == []
    assert [clock.clock_fields(v) for v in (123, 31337, 10**12)] == [[], [], []]
    assert shared_field([["hour"], ["hour", "second"]], [13, 14]) == "hour"
    assert shared_field([["hour"], ["minute"]], [13, 14]) is None
    assert shared_field([["hour"], None], [13, 14]) is None


class _Augmented(torch.utils.data.Dataset):
    """Each sample drawn from one global stream (``stream``) or from none."""

    def __init__(self, stream: str | None) -> None:
        self.stream = stream

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> torch.Tensor:
        noise = {"python": lambda: random.random(), "numpy": lambda: float(np.random.rand()),
                 "torch": lambda: float(torch.rand(()))}.get(self.stream or "", lambda: 0.0)()
        return torch.tensor([i + 0.01 * noise])


def test_the_global_streams_a_fetch_draws_from_are_noted_once_a_run(seeded: dict[str, Any]) -> None:
    """With ``watch_draws`` (``--across workers=``/``start=`` runs), a DataLoader fetch that
    advances a global stream is noted once a stream, in the main process here (no workers);
    a loader drawing from none notes nothing, and without ``watch_draws`` nothing is noted."""
    w = Watched(seeded)
    for batch in torch.utils.data.DataLoader(_Augmented("python"), batch_size=2):
        pass
    assert not any("draw" in r.get("info", {}) for r in w.records)  # not asked
    w.watch.watch_draws()
    rows = {row.target: row.features for row in patches.PATCHES.listing()}
    assert rows["torch.utils.data._utils.fetch._MapDatasetFetcher.fetch"] == ("watch.draws",)
    for stream in (None, "python", "python", "numpy", "torch"):
        for batch in torch.utils.data.DataLoader(_Augmented(stream), batch_size=2):
            pass
    draws = [r["info"]["draw"] for r in w.records if "draw" in r.get("info", {})]
    assert draws == [{"stream": s, "worker": False} for s in ("python", "numpy", "torch")]
