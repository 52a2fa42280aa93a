"""Targets for the ``--across`` and ``bisect`` tests that train without torch.optim's optimizers.

A run of a target imports torch (seconds); a target that builds a ``torch.optim`` optimizer
(SGD, Adam) also makes torch import ``torch._dynamo`` on that first construction (seconds more,
torch's own lazy import). Where the optimizer is not what a test is about, these targets are the
fixtures' own scripts with their optimizer swapped for :data:`PLAIN_SGD`'s ``PlainSGD`` (for
SGD) or ``PlainAdam`` (for Adam): subclasses of ``torch.optim.Optimizer`` whose
``add_param_group``, ``step`` and ``zero_grad`` are plain Python, so dynamo is never imported, while repro-check still sees an optimizer (its ``params``, ``lr``
and ``opt`` signals, one step per ``step()``). Everything else in a script is kept as written:
its model, its data, its options.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..conftest import FIXTURES
from ..git_repos import commit, git, script

#: plain SGD and Adam: the updates of torch.optim.SGD (no momentum) and torch.optim.Adam (its
#: defaults), written out
PLAIN_SGD = '''import torch as _plain_torch


class PlainSGD(_plain_torch.optim.Optimizer):
    """SGD without torch.optim's fused and foreach paths (which import torch._dynamo)."""

    def __init__(self, params, lr):
        super().__init__(params, {"lr": lr})

    def add_param_group(self, group):
        group["params"] = list(group["params"])
        group.setdefault("lr", self.defaults["lr"])
        self.param_groups.append(group)

    @_plain_torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])

    def zero_grad(self, set_to_none=True):
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None


class PlainAdam(PlainSGD):
    """Adam (betas 0.9 and 0.999, eps 1e-8) without torch.optim's fused and foreach paths."""

    @_plain_torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = _plain_torch.zeros_like(p)
                    state["exp_avg_sq"] = _plain_torch.zeros_like(p)
                state["step"] += 1
                t, m, v = state["step"], state["exp_avg"], state["exp_avg_sq"]
                m.mul_(0.9).add_(p.grad, alpha=0.1)
                v.mul_(0.999).addcmul_(p.grad, p.grad, value=0.001)
                denom = (v / (1 - 0.999 ** t)).sqrt_().add_(1e-8)
                p.addcdiv_(m, denom, value=-group["lr"] / (1 - 0.9 ** t))


'''

_OPTIMIZER = re.compile(r"torch\.optim\.(SGD|Adam)\(")


def light(source: str) -> str:
    """``source`` with its one ``torch.optim.SGD(``/``Adam(`` made :data:`PLAIN_SGD`'s
    ``PlainSGD(``/``PlainAdam(`` (an error when there is not exactly one: a changed fixture
    cannot silently keep its optimizer)."""
    text, count = _OPTIMIZER.subn(lambda m: f"Plain{m.group(1)}(", source)
    if count != 1:
        raise AssertionError(f"expected one torch.optim optimizer to replace, found {count}")
    return PLAIN_SGD + text


def light_fixture(name: str, folder: Path) -> Path:
    """fixtures/``name`` with :data:`PLAIN_SGD` for its optimizer, written into ``folder``
    under the same name (run it from there, as the fixture is run from fixtures/)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(light((FIXTURES / name).read_text()))
    return path


def light_script(scale: str = "1.0", broken: bool = False) -> str:
    """tests/git_repos.py's training script (same model, same SCALE and BROKEN) with
    :data:`PLAIN_SGD`."""
    return light(script(scale, broken))


def light_five_commits(repo: Path) -> list[str]:
    """git_repos.five_commits with :func:`light_script`: five commits of model.py, the second
    broken, the fourth scaling the output by 1.001, the fifth only adding a README."""
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    return [commit(repo, "one: the model", {"model.py": light_script()}),
            commit(repo, "two: broken", {"model.py": light_script(broken=True)}),
            commit(repo, "three: fixed", {"model.py": light_script()}),
            commit(repo, "four: scale the output", {"model.py": light_script("1.001")}),
            commit(repo, "five: a readme", {"README": "notes\n"})]
