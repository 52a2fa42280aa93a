"""The static scan on small sources: what is followed, what is deliberately not reported."""

from __future__ import annotations

import textwrap

import pytest

from repro_check.doctor.checkup import scan_source


def codes(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in scan_source(textwrap.dedent(source))]


@pytest.mark.parametrize("default, flagged", [("0", False), ("4", True)])
def test_argparse_default_decides_num_workers(default, flagged):
    src = f"""
        import argparse
        from torch.utils.data import DataLoader
        p = argparse.ArgumentParser()
        p.add_argument("-j", "--num-workers", type=int, default={default})
        args = p.parse_args()
        loader = DataLoader([1, 2], num_workers=args.num_workers)
    """
    assert codes(src) == ([(7, "RC101")] if flagged else [])


def test_dataloader_keyword_sources():
    src = """
        from torch.utils.data import DataLoader as DL
        import torch
        kw = dict(num_workers=2, batch_size=4)
        a = DL([1], **kw)
        def make(ds, **options):
            return DL(ds, num_workers=2, **options)
        b = DL([1], 1, False, None, None, 2, None, False, False, 0, None, None, torch.Generator())
        c = DL([1], num_workers=2 if torch.cuda.is_available() else 4)
        d = DL([1], num_workers=config["workers"])
    """
    assert codes(src) == [(5, "RC101"), (9, "RC101")]


def test_clock_reaches_a_seed_through_a_variable_but_timing_is_fine():
    src = """
        import time, uuid, os
        import torch
        t = time.time()
        torch.manual_seed(int(t) % 1000)
        start = time.time()
        elapsed = time.time() - start
        run_name = f"run-{uuid.uuid4().hex}-{os.getpid()}"
        torch.manual_seed(os.getpid())
        f = lambda seed=time.time(): seed
        torch.manual_seed(hash("experiment-1") % 2**32)
        key = hash(("a", 1))
    """
    assert codes(src) == [(5, "RC104"), (9, "RC104"), (10, "RC104"), (11, "RC104")]


def test_same_names_outside_torch_are_not_ops():
    src = """
        import numpy as np
        import statistics
        import queue
        import torch
        from torch.nn import functional as F
        a = np.median(np.arange(3), 0)
        b = statistics.median([1, 2])
        q = queue.Queue()
        q.put(1)
        c = np.bincount([0, 1], [1.0, 2.0])
        d = np.pad(np.arange(3), 1, mode="reflect")
        mode = "bilinear"
        e = F.interpolate(torch.zeros(1, 1, 2, 2), scale_factor=2, mode=mode)
        g = F.grid_sample(torch.zeros(1, 1, 2, 2), torch.zeros(1, 2, 2, 2))
        def up(x, how):
            return F.interpolate(x, scale_factor=2, mode=how)
    """
    assert codes(src) == [(14, "RC108"), (15, "RC108")]


def test_sets_built_up_and_sorted_later():
    src = """
        names = set()
        names |= {"a", "b"}
        for n in names:
            print(n)
        ordered = list(names)
        ordered.sort()
        counted = sum(1 for n in sorted(names))
        numbers = {3, 1, 2}
        print([x for x in numbers])
    """
    assert codes(src) == [(4, "RC107")]


def test_cudnn_flags_context():
    src = """
        import torch
        with torch.backends.cudnn.flags(enabled=False):
            pass
        with torch.backends.cudnn.flags(enabled=True, deterministic=True):
            pass
        torch.backends.cudnn.set_flags(True, False, None, False)
    """
    assert codes(src) == [(7, "RC103")]


def test_comment_on_any_line_of_a_multiline_call_silences_it():
    src = """
        import torch
        a = torch.utils.data.DataLoader(
            [1], num_workers=2,
        )  # repro-check: ignore[RC101]
        b = torch.utils.data.DataLoader(
            [1], num_workers=2,
        )  # repro-check: ignore[RC107]
        s = "# repro-check: ignore"; torch.seed()
    """
    assert codes(src) == [(6, "RC101"), (9, "RC105")]


def test_one_finding_per_code_and_line_named_by_the_first_rule():
    src = """
        import os, time, torch
        seed = torch.manual_seed(int(time.time()))
        torch.backends.cudnn.benchmark = torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.deterministic = flag = False
        key = os.urandom(8); torch.manual_seed(os.urandom(4)[0])
    """
    found = [(f.line, f.code, f.message) for f in scan_source(textwrap.dedent(src))]
    assert found == [
        (3, "RC104", "seed is taken from time.time()"),
        (4, "RC102", "torch.backends.cudnn.benchmark = True lets cuDNN pick kernels by timing them"),
        (5, "RC103", "torch.backends.cudnn.deterministic = False allows nondeterministic cuDNN "
                     "kernels"),
        (6, "RC104", "torch.manual_seed(os.urandom(4)[0]) seeds from os.urandom()"),
        (6, "RC111", "os.urandom() draws from the operating system's entropy"),
    ]
