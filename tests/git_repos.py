"""Small git repositories made in a test: a training script whose history the test writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from .conftest import cli_env

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


#: a script that says it has started on the FIFO its first argument names, then trains no further
#: until it is stopped: a run to interrupt midway, with no guess at how long anything takes
HANGING = '''import sys
import time


def main():
    with open(sys.argv[1], "w") as fifo:
        fifo.write("started\\n")
    while True:
        time.sleep(60)
'''


def interrupt_when_started(argv: list[str], cwd: Path, fifo: Path, tmpdir: Path,
                           timeout: float = 240) -> tuple[int, str]:
    """Run ``python -m repro_check ARGV`` in a process group of its own, wait until a run of the
    target writes to ``fifo`` (a named pipe made here), then Ctrl-C the whole group, as a
    terminal does. Returns the exit status and stderr. ``TMPDIR`` is ``tmpdir``, so the caller
    can see what temporary folders were left behind."""
    os.mkfifo(fifo)
    heard: list[str] = []
    listener = threading.Thread(target=lambda: heard.append(fifo.read_text()), daemon=True)
    listener.start()  # opening the FIFO to read waits for the run that opens it to write
    proc = subprocess.Popen([sys.executable, "-m", "repro_check", *argv], cwd=cwd,
                            env=cli_env(TMPDIR=str(tmpdir)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        listener.join(timeout)
        assert heard == ["started\n"], "no run of the target started"
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches every process of the group
        _, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if not heard:  # release the listener: its open() waits for a writer
            with open(fifo, "w"):
                pass
    return proc.returncode, err
