"""Small git repositories made in a test: a training script whose history the test writes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

#: a tiny model; SCALE multiplies its output (an op whose numerics a commit changes), BROKEN
#: makes the script raise before training
SCRIPT = '''import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x):
        return self.fc(x) * {scale}


def main():
    {broken}
    x = torch.randn(16, 4)
    y = x.sum(1, keepdim=True)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {{"loss": loss.item()}}
'''


def script(scale: str = "1.0", broken: bool = False) -> str:
    return SCRIPT.format(scale=scale, broken="raise RuntimeError('a broken commit')" if broken
                         else "pass")


def git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="Ada", GIT_AUTHOR_EMAIL="ada@example.com",
               GIT_COMMITTER_NAME="Ada", GIT_COMMITTER_EMAIL="ada@example.com")
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=env).stdout


def commit(repo: Path, message: str, files: dict[str, str]) -> str:
    for name, text in files.items():
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def five_commits(repo: Path) -> list[str]:
    """Five commits of model.py: the second is broken (the target raises), the fourth scales the
    model's output by 1.001 (its numerics change), the fifth only adds a file."""
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    return [commit(repo, "one: the model", {"model.py": script()}),
            commit(repo, "two: broken", {"model.py": script(broken=True)}),
            commit(repo, "three: fixed", {"model.py": script()}),
            commit(repo, "four: scale the output", {"model.py": script("1.001")}),
            commit(repo, "five: a readme", {"README": "notes\n"})]


def state(repo: Path) -> dict[str, str]:
    """What a run must never change: status, HEAD, branch, stash, worktrees, index."""
    return {"status": git(repo, "status", "--porcelain=v1", "--untracked-files=all"),
            "head": git(repo, "rev-parse", "HEAD"),
            "branch": git(repo, "symbolic-ref", "-q", "HEAD"),
            "stash": git(repo, "stash", "list"),
            "worktrees": git(repo, "worktree", "list", "--porcelain"),
            "index": (repo / ".git" / "index").read_bytes().hex(),
            "bisect": str(sorted(p.name for p in (repo / ".git").glob("BISECT_*")))}
