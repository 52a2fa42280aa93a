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


# ---- what the whole program seeds (RC101, RC114, RC115) ---------------------------------------

@pytest.mark.parametrize("seeding, flagged", [
    ("torch.manual_seed(args.seed)", False),
    ("seed_everything(42)", False),
    ("L.seed_everything(42, workers=True)", False),
    ("transformers.set_seed(7)", False),
    ("utils.init_seeds(args.seed + 1)", False),
    ("torch.set_rng_state(state)", False),
    ("torch.seed()", True),
    ("torch.cuda.manual_seed_all(0)", True),
    ("torch.Generator().manual_seed(0)", True),
    ("random.seed(0); np.random.seed(0)", True),
    ("torch.manual_seed(int(time.time()))", True),
])
def test_workers_are_a_hazard_only_without_a_fixed_torch_seed(seeding, flagged):
    src = f"""
        import argparse, random, time
        import lightning as L
        import numpy as np
        import torch
        import transformers
        import utils
        from lightning import seed_everything
        from torch.utils.data import DataLoader
        p = argparse.ArgumentParser()
        p.add_argument("--seed", type=int, default=1)
        args = p.parse_args()
        state = None
        {seeding}
        loader = DataLoader([1, 2], num_workers=4)
    """
    found = {code for _, code in codes(src)}
    assert ("RC101" in found) == flagged


def test_a_seed_from_the_clock_keeps_workers_a_hazard_and_says_why():
    src = """
        import time, torch
        torch.manual_seed(int(time.time()))
        loader = torch.utils.data.DataLoader([1], num_workers=2)
    """
    assert codes(src) == [(3, "RC104"), (4, "RC101")]


def with_seed_option(default: str, body: str) -> str:
    """A script with a ``--seed`` option of that default, then ``body``."""
    return ("import argparse, random, torch\np = argparse.ArgumentParser()\n"
            f"p.add_argument('--seed', type=int, default={default})\nargs = p.parse_args()\n"
            f"{body}\n")


def test_dcgan_style_seed_when_none_is_given():
    src = """
        import argparse, random, torch
        parser = argparse.ArgumentParser()
        parser.add_argument("--manualSeed", type=int, help="manual seed")
        opt = parser.parse_args()
        if opt.manualSeed is None:
            opt.manualSeed = random.randint(1, 10000)
        print("Random Seed: ", opt.manualSeed)
        random.seed(opt.manualSeed)
        torch.manual_seed(opt.manualSeed)
    """
    found = [(f.line, f.code, f.message) for f in scan_source(textwrap.dedent(src))]
    assert found == [(9, "RC115", "random.seed(opt.manualSeed) seeds from random.randint(1, "
                                  "10000) (line 7), drawn from Python's random, which nothing "
                                  "seeds with a fixed value")]


@pytest.mark.parametrize("choose", [
    "if args.seed is None:\n    args.seed = random.randint(1, 10000)",
    "if not args.seed:\n    args.seed = random.randint(1, 10000)",
    "args.seed = args.seed or random.randint(1, 10000)",
    "args.seed = args.seed if args.seed is not None else random.randint(1, 10000)",
])
@pytest.mark.parametrize("default, flagged", [("None", True), ("42", False)])
def test_a_seed_default_rules_out_the_random_branch(choose, default, flagged):
    src = with_seed_option(default, f"{choose}\ntorch.manual_seed(args.seed)")
    last = src.count("\n")
    assert codes(src) == ([(last, "RC115")] if flagged else [])


def test_seeds_drawn_through_names_parameters_and_numpy():
    src = """
        import random
        import numpy as np
        import torch

        def seed_all(seed):
            torch.manual_seed(seed)

        def run(s):
            seed_all(s)

        run(random.randint(0, 100))
        x = np.random.randint(2**31)
        g = torch.Generator().manual_seed(x)
        pick = random.choice([1, 2])
        batch = torch.randint(0, 10, (4,))
    """
    assert codes(src) == [(10, "RC115"), (14, "RC115")]


def test_a_draw_is_fine_once_its_stream_has_a_fixed_seed():
    src = """
        import random, torch
        random.seed(0)
        seed = random.randint(1, 10000)
        torch.manual_seed(seed)
        loader = torch.utils.data.DataLoader([1], num_workers=2)
    """
    assert codes(src) == []


def test_draws_in_a_dataset_count_as_torch_draws():
    src = """
        import random
        import numpy as np
        import torch
        from torch.utils.data import Dataset

        class Pairs(Dataset):
            def __getitem__(self, i):
                seed = np.random.randint(2147483647)
                random.seed(seed)
                return i
    """
    assert codes(src) == [(10, "RC115")]
    assert codes(textwrap.dedent(src) + "torch.manual_seed(0)\n") == []


@pytest.mark.parametrize("training, flagged", [
    ("opt = torch.optim.AdamW(model.parameters())", True),
    ("model(x).sum().backward()", True),
    ("trainer = L.Trainer(max_epochs=1)\ntrainer.fit(model)", True),
    ("from lightning.pytorch.cli import LightningCLI\nLightningCLI(Net)", False),
    ("trainer = transformers.Trainer(model=model)\ntrainer.train()", False),
    ("class T(transformers.Trainer):\n    pass\nT(model=model).train()", False),
    ("sched = torch.optim.lr_scheduler.StepLR(None, 1)", False),
    ("model.train()", False),
    ("clf = LogisticRegression()\nclf.fit(x, y)", False),
])
def test_what_counts_as_training_that_never_seeds_torch(training, flagged):
    src = "import lightning as L\nimport torch\nimport transformers\n" \
          "from sklearn.linear_model import LogisticRegression\n" \
          "model = torch.nn.Linear(2, 1)\nx = y = torch.randn(4, 2)\n" + training + "\n"
    assert ("RC114" in {code for _, code in codes(src)}) == flagged
    assert "RC114" not in {code for _, code in codes(src + "torch.manual_seed(0)\n")}


@pytest.mark.parametrize("choose, flagged", [
    ("seed = random.randint(0, 2**32 - 1) if args.seed == -1 else args.seed", False),
    ("seed = args.seed if args.seed else random.randint(1, 100)", False),
    ("seed = args.seed\nif seed is None:\n    seed = random.randint(1, 100)", False),
    ("seed = args.seed\nif seed == 42:\n    pass\nelse:\n    seed = random.randint(1, 100)", False),
    ("seed = args.seed\nif seed == 42:\n    seed = random.randint(1, 100)", True),
    ("seed = random.randint(1, 100) if args.seed > 0 else 0", True),
])
def test_tests_the_file_decides_rule_out_a_draw(choose, flagged):
    src = with_seed_option("42", f"{choose}\ntorch.manual_seed(seed)")
    assert ("RC115" in {code for _, code in codes(src)}) == flagged


@pytest.mark.parametrize("call, seeds_torch", [
    ("utils.seed(0)", True), ("seed(0)", True), ("fabric.seed_everything(0)", True),
    ("trainer_utils.set_seed(0)", True), ("rng.seed(0)", False), ("g.manual_seed(0)", False),
    ("torch.cuda.manual_seed(0)", False), ("np.random.seed(0)", False),
    ("torch.initial_seed()", False), ("utils.get_seed()", False),
])
def test_which_calls_seed_torch(call, seeds_torch):
    src = f"""
        import numpy as np
        import torch
        import utils
        from transformers import trainer_utils
        from utils import seed
        rng = np.random.RandomState(1)
        g = torch.Generator()
        {call}
        loss = torch.zeros(1, requires_grad=True).sum()
        loss.backward()
    """
    assert ("RC114" not in {code for _, code in codes(src)}) == seeds_torch


def test_draws_in_a_worker_init_fn_count_as_torch_draws():
    src = """
        import numpy as np
        import torch
        from torch.utils.data import DataLoader

        def reseed(worker_id):
            np.random.seed(np.random.randint(2**31) + worker_id)

        a = DataLoader([1], num_workers=2, worker_init_fn=reseed)
        b = DataLoader([1], num_workers=2,
                       worker_init_fn=lambda i: np.random.seed(np.random.randint(99) + i))
    """
    assert codes(src) == [(7, "RC115"), (11, "RC115")]
    assert codes(textwrap.dedent(src) + "torch.manual_seed(0)\n") == []


# ---- today's GPU stacks --------------------------------------------------------------------

@pytest.mark.parametrize("switch, flagged", [
    ("", True),
    ("torch.use_deterministic_algorithms(True)", False),
    ("torch.use_deterministic_algorithms(True, warn_only=True)", True),
    ("torch.use_deterministic_algorithms(args.deterministic)", False),  # not shown: may be on
    ("torch.set_deterministic_debug_mode('error')", False),
    ("enable_full_determinism(42)", False),
])
def test_atomic_add_ops_count_only_while_deterministic_algorithms_stay_off(switch, flagged):
    src = f"""
        import torch
        from transformers import enable_full_determinism
        {switch}
        def main():
            out = torch.zeros(5, device="cuda")
            out.index_add_(0, torch.tensor([0, 1]), torch.ones(2))
            torch.nn.Embedding(3, 2)(torch.tensor([0])).sum().backward()
    """
    found = {c for _, c in codes(src)} - {"RC110", "RC114"}
    assert found == ({"RC109", "RC123"} if flagged else set())


def test_common_kernels_need_cuda_named_and_are_reported_once():
    cpu = """
        import numpy as np
        import torch
        torch.manual_seed(0)
        emb = torch.nn.Embedding(10, 4)
        x = torch.cumsum(torch.arange(3), 0)
        frame_sum = frame.cumsum()
    """
    assert codes(cpu) == []
    inference = cpu + """
        y = emb.weight.cuda().gather(0, torch.zeros(2, 4, dtype=torch.long))
        z = np.cumsum([1, 2])
    """
    found = scan_source(textwrap.dedent(inference))  # no backward: only cumsum's forward counts
    assert [(f.line, f.code) for f in found] == [(6, "RC123")]
    assert found[0].message.startswith("torch.cumsum is nondeterministic on CUDA (atomic adds)")
    training = inference + """
        y.sum().backward()
    """
    found = scan_source(textwrap.dedent(training))
    assert [(f.line, f.code) for f in found] == [(5, "RC123")]
    assert found[0].message.startswith("torch.nn.Embedding is nondeterministic on CUDA (atomic "
                                       "adds in its backward)")
    assert found[0].message.endswith("(also: .gather(), torch.cumsum)")


@pytest.mark.parametrize("model, flagged", [
    ("nn.Linear(4, 1)", False),
    ("nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1))", True),
    ("nn.Sequential(nn.Linear(4, 4), nn.Dropout(p=0.0))", False),
    ("Noisy()", True),
    ("nn.TransformerEncoderLayer(8, 2)", True),  # dropout=0.1 by default
    ("nn.TransformerEncoderLayer(8, 2, dropout=0.0)", False),
])
def test_compile_under_deterministic_algorithms_speaks_only_of_random_draws(model, flagged):
    src = f"""
        import torch
        import torch.nn as nn
        class Noisy(nn.Module):
            def forward(self, x):
                return x + torch.randn_like(x) if "{model}" == "Noisy()" else x
        torch.use_deterministic_algorithms(True)
        model = torch.compile({model})
    """
    found = scan_source(textwrap.dedent(src))
    if "Noisy" not in model:  # the class draws only where it is the compiled model
        src = src.replace("torch.randn_like(x)", "0")
        found = scan_source(textwrap.dedent(src))
    assert [f.code for f in found] == (["RC117"] if flagged else [])
    if flagged:
        assert "fallback_random" in found[0].message and "deterministic, " not in found[0].message


def test_compile_without_deterministic_algorithms_still_names_both_settings():
    found = scan_source("import torch\nm = torch.compile(torch.nn.Linear(2, 2))\n")
    assert [f.code for f in found] == ["RC117"]
    assert "deterministic, fallback_random" in found[0].message


def test_nvte_switch_set_anywhere_in_the_program_clears_transformer_engine():
    unset = "import transformer_engine.pytorch as te\nimport transformer_engine\n"
    assert codes(unset) == [(1, "RC121")]
    assert codes("import os\nos.environ['NVTE_ALLOW_NONDETERMINISTIC_ALGO'] = '0'\n" + unset) == []
    assert codes("import os\nos.environ['NVTE_ALLOW_NONDETERMINISTIC_ALGO'] = '1'\n" + unset) \
        == [(3, "RC121")]


def test_uninitialized_memory_stops_at_what_it_cannot_follow():
    src = """
        import torch
        def f(x, n, fill):
            a = torch.empty(4)
            fill(a)
            s1 = a.sum()
            b = torch.empty(4)
            b[:n] = x
            b = torch.zeros(4)
            s2 = b.sum()
            c = torch.empty(4)
            c[:2] = x
            d = torch.empty(4)
            d[x > 0] = 1.0
            d[x <= 0] = 0.0
            return c.shape, torch.sum(c, dim=0), d.sum()
    """
    assert codes(src) == [(16, "RC122")]  # d: two parts written may be the whole
