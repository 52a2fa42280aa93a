"""Every command line README.md and docs/ show runs as shown, on a fresh copy of the fixtures.

The commands are read from the documents' code blocks (``$ `` lines of a transcript, the lines
of a ``sh`` block or an indented block that start with ``repro-check``/``make``/``python``/
``cd``/``pip``, and the ``- run:`` steps of a workflow). Each must be in :data:`KNOWN` below,
which says how it is run here: as shown, or with a cheaper stand-in that keeps every flag the
document shows and only adds bounds (``--max-steps 2``, fewer sources, fewer ablation pairs) or
drops what a fresh clone cannot have (the full MNIST of ``-- --data DIR``: the embedded subset
is read instead). Commands that cannot run here say why (two machines, the network). A
synopsis line is checked against the command's ``--help``.

A command added to a document without an entry here fails :func:`test_every_documented_command_is_known`
with the list of the new ones: add each to :data:`KNOWN`.

The runs cost a few minutes on a loaded 2-core machine, so they are marked ``slow``
(``pytest -m 'not slow'`` leaves them out); the check that every command is known is instant.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .conftest import FIXTURES, ROOT, cli_env

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Run:
    """How a documented command is run here: ``run`` (default: as shown) from ``cwd`` (a fresh
    copy of ``fixtures`` or an empty project folder), after ``setup`` (commands it needs run
    first, e.g. the ``record`` before a ``verify``); ``codes``: the exit codes it may give."""

    cwd: str = "fixtures"
    run: str | None = None
    codes: tuple[int, ...] = (0,)
    setup: tuple[str, ...] = ()
    why: str = ""


@dataclass(frozen=True)
class Skip:
    """A command that cannot run in a test, and why."""

    why: str


@dataclass(frozen=True)
class Synopsis:
    """A usage line (placeholders, brackets): its command's ``--help`` must name every flag."""

    command: str


@dataclass(frozen=True)
class Make:
    """A make target: its recipe (``make -n``) must hold ``contains``."""

    contains: tuple[str, ...] = field(default_factory=tuple)


CHEAP = "bounded with --max-steps to keep the test short"
FULL_MNIST = "DIR is the full MNIST, which a fresh clone does not have: the embedded subset"
SECOND_TORCH = "needs a second torch installed from the network by the command before it"

KNOWN: dict[str, Run | Skip | Synopsis | Make] = {
    # ---- docs/across.md: workers, start methods, compile and revisions; docs/bisect.md
    "repro-check loaders.py:main --across workers=0,2 -- --augment global":
        Run(run="repro-check loaders.py:main --across workers=0,2 --max-steps 2 -- --augment "
                "global", codes=(1,), why=CHEAP),
    "repro-check model.py:main --across rev=main,WORKTREE":
        Skip("needs a git repository with a main branch and a model.py (tests/run/"
             "test_across_axes.py makes one)"),
    "repro-check bisect v1.2 HEAD model.py:main -- --steps 20":
        Skip("needs a git repository with a history (tests/gate/test_bisect.py makes one)"),
    # ---- README: the opening example and the two make targets
    "cd fixtures && repro-check train:main --seed 123":
        Run(run="repro-check train:main --seed 123 --max-steps 3", why=CHEAP),
    "make demo": Make(("repro-check repro_check.workloads.mnist:main --seed 123",)),
    "make test": Make(("pytest",)),
    "repro-check repro_check.workloads.mnist:main --seed 123":  # what `make demo` runs
        Run(run="repro-check repro_check.workloads.mnist:main --seed 123 --max-steps 3",
            why=CHEAP),
    # ---- README: the usage synopsis
    "repro-check [check] TARGET [--seed N | --no-seed] [--without A,B] [--runs N] [--max-steps N]":
        Synopsis("check"),
    "repro-check record TARGET -o golden.json [--runs N]": Synopsis("record"),
    "repro-check verify TARGET --golden golden.json": Synopsis("verify"),
    "repro-check diff A.jsonl B.jsonl": Synopsis("diff"),
    "repro-check diagnose TARGET [--max-sources N] [--no-localize] [--no-ablation]":
        Synopsis("diagnose"),
    "repro-check doctor [TARGET ...] [--sarif PATH]": Synopsis("doctor"),
    "repro-check resume TARGET --at K --resume-args 'ARGS'": Synopsis("resume"),
    "repro-check bisect GOOD BAD TARGET [--golden G]": Synopsis("bisect"),
    # ---- docs/resume.md
    "repro-check resume TARGET --at K --resume-args 'ARGS' [--checkpoint PATH_OR_GLOB]":
        Synopsis("resume"),
    "cd fixtures && repro-check resume resume/train.py:main --at 3 --resume-args "
    "'--resume {checkpoint} --epoch-restart' -- --no-rng --no-opt --no-sched":
        Run(run="repro-check resume resume/train.py:main --at 3 --resume-args "
                "'--resume {checkpoint} --epoch-restart' -- --no-rng --no-opt --no-sched",
            codes=(1,), why="the resume differs: exit 1"),
    # ---- docs/works-with.md
    "repro-check train.py --metric 'bleu=BLEU = ([\\d.]+)' -- --epochs 1":
        Run(run="repro-check train.py --metric 'bleu=BLEU = ([\\d.]+)' --max-steps 3 -- "
                "--epochs 1", why=CHEAP),
    # ---- docs/finished-runs.md: diff of two finished runs' logs and checkpoints
    "python finished/train_log.py --out run1": Run(),
    "python finished/train_log.py --out run2": Run(),
    "python finished/train_log.py --out run3 --nudge-at 4": Run(),
    "repro-check diff run1/metrics.csv run2/metrics.csv":
        Run(setup=("python finished/train_log.py --out run1",
                   "python finished/train_log.py --out run2"), why="the two runs first"),
    "repro-check diff run1/metrics.jsonl run3/metrics.jsonl":
        Run(setup=("python finished/train_log.py --out run1",
                   "python finished/train_log.py --out run3 --nudge-at 4"), codes=(1,),
            why="the two runs first; they differ: exit 1"),
    "repro-check diff run1/checkpoint.pt run3/checkpoint.pt":
        Run(setup=("python finished/train_log.py --out run1",
                   "python finished/train_log.py --out run3 --nudge-at 4"), codes=(1,),
            why="the two runs first; they differ: exit 1"),
    # ---- docs/gate-and-ci.md
    "repro-check record train:main --seed 123 -o goldens/train.json":
        Run(run="repro-check record train:main --seed 123 -o goldens/train.json --max-steps 3",
            why=CHEAP),
    "repro-check verify train:main --golden goldens/train.json":
        Run(setup=("repro-check record train:main --seed 123 -o goldens/train.json "
                   "--max-steps 3",), why="the golden recorded first, bounded"),
    # the workflow's steps, in a project whose [tool.repro-check] lists a target and its golden
    "pip install -e .": Skip("installs the user's project from the network (the CI's own step)"),
    "mkdir -p reports": Run(cwd="project", run="mkdir -p reports"),
    "repro-check verify --junit reports/repro-check.xml --json reports/repro-check.json":
        Run(cwd="project", setup=("mkdir -p reports", "repro-check record"),
            why="in a project whose [tool.repro-check] holds a target and its golden"),
    # ---- docs/debugging.md: doctor
    "repro-check doctor train.py:main": Run(codes=(0, 1)),
    "repro-check doctor": Run(),
    "repro-check doctor --no-env --sarif doctor.sarif train.py": Run(codes=(0, 1)),
    "pip install torch-repro-check": Skip("installs from the package index (the network)"),
    'pip install "torch-repro-check @ git+https://github.com/<owner>/repro-check@<tag>"':
        Skip("installs from a git repository (the network)"),
    "pip install dist/torch_repro_check-0.1.0-py3-none-any.whl":
        Skip("needs a wheel built first: `make wheel-check` (run by .ci/run) builds one and "
             "installs it into a fresh venv outside the checkout"),
    "repro-check doctor train.py --json doctor.json": Run(codes=(0, 1)),
    "repro-check doctor train.py --no-env --ignore RC107": Run(codes=(0, 1)),
    # ---- docs/debugging.md: diagnose
    "repro-check diagnose zoo/three_sources.py:main --without hashseed --no-ablation":
        Run(run="repro-check diagnose zoo/three_sources.py:main --without hashseed "
                "--no-ablation --max-steps 1 --max-sources 1", codes=(1,),
            why="all three sources are at step 1; one pinned pair instead of three"),
    "repro-check diagnose repro_check.workloads.mnist:main --seed 123 --max-steps 50":
        Run(run="repro-check diagnose repro_check.workloads.mnist:main --seed 123 "
                "--max-steps 2 --ablate torch",
            why="one component's pair and the pair without seeding (the one --seed broke)"),
    # ---- docs/across.md
    "repro-check train.py:main --seed 123 --across threads=1,2":
        Run(run="repro-check train.py:main --seed 123 --across threads=1,2 --max-steps 2",
            codes=(0, 1), why=CHEAP),
    "repro-check train.py:main --across deterministic=on,off --across threads=1,2":
        Run(run="repro-check train.py:main --across deterministic=on,off --across threads=1,2 "
                "--max-steps 2", codes=(0, 1), why=CHEAP),
    "repro-check repro_check.workloads.mnist:main --seed 123 --across threads=1,2 -- --data DIR":
        Run(run="repro-check repro_check.workloads.mnist:main --seed 123 --across threads=1,2 "
                "--max-steps 2", codes=(0, 1), why=FULL_MNIST),
    "python3 -m venv /tmp/venv213 && /tmp/venv213/bin/pip install torch==2.13.0 numpy rich xxhash":
        Skip("installs torch 2.13.0 from the network"),
    "cd fixtures && repro-check environments.py:main --across python=../.venv/bin/python,"
    "/tmp/venv213 --across threads=1,2 -- --steps 100": Skip(SECOND_TORCH),
    # ---- docs/distributed.md
    "repro-check train.py:main --seed 123 --nproc-per-node 2":
        Run(run="repro-check train.py:main --seed 123 --nproc-per-node 2 --max-steps 2",
            codes=(0, 1), why=CHEAP),
    "repro-check train.py:main --seed 123 --nproc-per-node 8 --nnodes 2 --node-rank 0 "
    "--master-addr 10.0.0.1 --master-port 29500": Skip("needs two machines, one at 10.0.0.1"),
    "repro-check train.py:main --seed 123 --nproc-per-node 8 --nnodes 2 --node-rank 1 "
    "--master-addr 10.0.0.1 --master-port 29500": Skip("needs two machines, one at 10.0.0.1"),
    # ---- docs/reference-workload.md
    "cd fixtures": Skip("only changes folder (the commands after it run in fixtures here)"),
    "repro-check compiled.py:main --across compile-cache=cold,warm --runs 2 -- --steps 2":
        Skip("compiles with inductor in three runs (minutes on a CPU): tests/run/"
             "test_across_axes.py runs it and checks the caches each run started from"),
    "repro-check flags.py:main --across 'args=|--checkpointing|--approximate tanh'":
        Run(run="repro-check flags.py:main --across 'args=|--checkpointing|--approximate "
                "tanh' --max-steps 2", codes=(1,), why=CHEAP),
    "repro-check ddp/train.py:main --across nproc=1,2 -- --global-batch 16":
        Run(run="repro-check ddp/train.py:main --across nproc=1,2 --max-steps 2 -- "
                "--global-batch 16", codes=(1,), why=CHEAP),
    "repro-check record flags.py:main --across 'args=|--checkpointing' -o goldens/flags.json":
        Run(run="repro-check record flags.py:main --across 'args=|--checkpointing' -o "
                "goldens/flags.json --max-steps 2", why=CHEAP),
    "repro-check verify flags.py:main --across 'args=|--checkpointing' --golden goldens/flags.json":
        Run(setup=("repro-check record flags.py:main --across 'args=|--checkpointing' -o "
                   "goldens/flags.json --max-steps 2",), why="after the record above"),
    # ---- docs/gate-and-ci.md: a flag as a gate
    "repro-check train.py:main --across 'args=|--checkpointing' --junit reports/checkpointing.xml":
        Run(run="repro-check flags.py:main --across 'args=|--checkpointing' --max-steps 2 "
                "--junit checkpointing.xml",
            why="flags.py has the flag the workflow's train.py stands for; " + CHEAP),
    "repro-check train:main --seed 123 -- --data DIR":
        Run(run="repro-check train:main --seed 123 --max-steps 2", why=FULL_MNIST),
    "repro-check train:main --no-seed -- --data DIR":
        Run(run="repro-check train:main --no-seed --max-steps 2", codes=(1,), why=FULL_MNIST),
}

#: commands that are not runs of ours but appear in a block with them (the shell's own)
SHELL = ("mkdir",)

#: the project of the CI workflow: one target with its golden, bounded
PROJECT_TOML = """\
[tool.repro-check]
seed = 123
max-steps = 3
golden-dir = "goldens"
targets = ["tiny.py:main"]
"""


# ---- reading the documents ---------------------------------------------------------------------
def code_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(language, lines) of every fenced block, and of every indented block ("indented")."""
    out: list[tuple[str, list[str]]] = []
    lines = text.splitlines()
    i, after_blank = 0, True
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if fence:
            body: list[str] = []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            out.append((fence.group(1), body))
            i, after_blank = i + 1, False
            continue
        if after_blank and lines[i].startswith("    ") and lines[i].strip():
            body = []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                body.append(lines[i][4:])
                i += 1
            out.append(("indented", body))
            after_blank = False
            continue
        after_blank = not lines[i].strip()
        i += 1
    return out


COMMAND = re.compile(r"^(repro-check|make|python3?|cd|pip)\b")


def commands_in(text: str) -> list[str]:
    """The command lines of a document: continuation lines joined, trailing ``  # comments``
    dropped; in a transcript (a block with ``$`` lines) only the ``$`` lines."""
    found: list[str] = []
    for lang, body in code_blocks(text):
        if lang in ("python", "py", "toml", "json", "ini"):
            continue
        joined: list[str] = []
        for line in body:
            if joined and joined[-1].endswith("\\"):
                joined[-1] = joined[-1][:-1].rstrip() + " " + line.strip()
            else:
                joined.append(line.strip())
        transcript = any(line.startswith("$ ") for line in joined)
        for line in joined:
            if lang == "yaml":
                step = re.match(r"^- run:\s*(.+)$", line)
                if step:
                    found.append(re.sub(r"\s{2,}#.*$", "", step.group(1)).strip())
                continue
            if transcript:
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            elif not COMMAND.match(line):
                continue
            found.append(re.sub(r"\s{2,}#.*$", "", line).strip())
    return found


def documented() -> dict[str, str]:
    """Every documented command, with the document it is in."""
    out: dict[str, str] = {}
    for doc in DOCUMENTS:
        for command in commands_in(doc.read_text(encoding="utf-8")):
            out.setdefault(command, doc.name)
    return out


def test_every_documented_command_is_known() -> None:
    shown = documented()
    unknown = [f"{doc}: {cmd}" for cmd, doc in shown.items() if cmd not in KNOWN]
    assert not unknown, (
        "commands in the documents that tests/test_readme_commands.py does not know how to run; "
        "add each to KNOWN (as shown, with a cheaper stand-in, or a Skip with the reason):\n  "
        + "\n  ".join(unknown))
    make_demo = "repro-check repro_check.workloads.mnist:main --seed 123"
    stale = [cmd for cmd in KNOWN if cmd not in shown and cmd != make_demo]
    assert not stale, "KNOWN lists commands no document shows any more:\n  " + "\n  ".join(stale)


def test_the_reader_finds_transcripts_blocks_and_workflow_steps() -> None:
    text = ("```console\n$ repro-check a:main \\\n    --seed 1   # note\nout: 1\n```\n\n"
            "    repro-check doctor x.py\n    python   not a command here? yes, it is\n\n"
            "```yaml\n      - run: repro-check verify   # ci\n```\n"
            "```python\nrepro_check.check('x')\n```\n")
    assert commands_in(text) == ["repro-check a:main --seed 1", "repro-check doctor x.py",
                                 "python   not a command here? yes, it is",
                                 "repro-check verify"]


# ---- what the documents link to and name -------------------------------------------------------
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a document's headings: lower case, punctuation dropped (``-`` and
    ``_`` kept), spaces as ``-``; a repeated heading gets ``-1``, ``-2``, ..."""
    out: set[str] = set()
    in_fence = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
        heading = None if in_fence else re.match(r"^#{1,6}\s+(.*?)\s*$", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
            base, n = slug, 0
            while slug in out:
                n += 1
                slug = f"{base}-{n}"
            out.add(slug)
    return out


def test_every_link_between_the_documents_resolves() -> None:
    broken = []
    for doc in DOCUMENTS:
        for target in LINK.findall(doc.read_text(encoding="utf-8")):
            if re.match(r"^[a-z]+:", target):
                continue  # https: and the like
            path, _, anchor = target.partition("#")
            where = (doc.parent / path).resolve() if path else doc
            if not where.exists():
                broken.append(f"{doc.name}: {target} (no such file)")
            elif anchor and where.suffix == ".md" and \
                    anchor not in anchors(where.read_text(encoding="utf-8")):
                broken.append(f"{doc.name}: {target} (no such heading)")
    assert not broken, "links that lead nowhere:\n  " + "\n  ".join(broken)


def test_the_anchor_rule_is_githubs() -> None:
    text = "# A `--max-steps` and final metrics\n## When repro-check fails: exit 4\n## X\n## X\n"
    assert anchors(text) == {"a---max-steps-and-final-metrics",
                             "when-repro-check-fails-exit-4", "x", "x-1"}


#: what only the developers' machines have: no document may show it
DEVELOPERS_ONLY = ("/work/", "../shared", "shared/data", "this project's machine")


def test_no_document_names_a_path_or_machine_only_the_developers_have() -> None:
    found = [f"{doc.name}: {word!r}" for doc in DOCUMENTS
             for word in DEVELOPERS_ONLY if word in doc.read_text(encoding="utf-8")]
    assert not found, "\n".join(found)


def flags_of(command: str, capsys: pytest.CaptureFixture[str]) -> set[str]:
    from repro_check import cli

    assert cli.console_main(["--help"] if command == "check" else [command, "--help"]) == 0
    return set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", capsys.readouterr().out))


def test_every_command_and_flag_of_the_help_is_in_the_cli_reference(
        capsys: pytest.CaptureFixture[str]) -> None:
    from repro_check.cli.commands import COMMANDS

    reference = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    missing = [f"{command} (the command)" for command in COMMANDS
               if f"`{command}`" not in reference]
    for command in COMMANDS:
        missing += [f"{command} {flag}" for flag in sorted(flags_of(command, capsys))
                    if f"`{flag}" not in reference and flag not in ("-h", "--help")]
    assert not missing, "flags of --help that docs/cli.md does not document:\n  " + \
        "\n  ".join(missing)


def test_every_key_of_the_json_report_is_documented() -> None:
    """A key added to the report (adding is allowed, it is a public API) is documented too: every
    key of a report with every part, the gate's of all three modes, and ``--across``'s."""
    from repro_check.report import contents, model

    parts = dict(gate=model.GatePart(mode="verify"), diagnosis=model.DiagnosisPart(),
                 distributed=model.DistributedPart(launch=contents.DistributedLaunch(
                     launcher="torch.distributed.run", nproc_per_node=1, nnodes="1",
                     torchrun_args=[])),
                 across=model.AcrossPart(axes=[], cells=[], pairs=[]),
                 processes=model.ProcessesPart(first_divergent_process=None),
                 resume=model.ResumePart(at=1, resume_args=None),
                 bisect=model.BisectPart(good=model.BisectCommit("1" * 40),
                                         bad=model.BisectCommit("2" * 40), candidates=1))
    report = model.Report(target="t", args=[], seed=1, components=[], runs=2, results=[],
                          comparison=None, **parts)  # type: ignore[arg-type]
    keys = set(report.to_dict())
    for mode in ("record", "diff"):
        keys |= set(model.GatePart(mode=mode, golden="g").to_dict())  # type: ignore[arg-type]
    reference = (ROOT / "docs" / "json-report.md").read_text(encoding="utf-8")
    missing = sorted(k for k in keys if f"`{k}`" not in reference)
    across = (ROOT / "docs" / "across.md").read_text(encoding="utf-8")
    missing += [f"across.{k}" for k in parts["across"].to_dict()["across"] if k not in across]
    bisect = (ROOT / "docs" / "bisect.md").read_text(encoding="utf-8")
    tested = model.JudgedCommit("3" * 40, verdict="skip", error="raised").to_dict()
    missing += [f"bisect.{k}" for k in [*parts["bisect"].to_dict()["bisect"], *tested]
                if k not in bisect]
    assert not missing, "keys of --json that docs/json-report.md does not document: " + \
        ", ".join(missing)


# ---- running them ------------------------------------------------------------------------------
def folder(kind: str, tmp: Path) -> Path:
    """A fresh copy of the fixtures (what a clone has), or an empty project with a config."""
    if kind == "fixtures":
        where = tmp / "fixtures"
        shutil.copytree(FIXTURES, where, ignore=shutil.ignore_patterns(".repro-check",
                                                                       "__pycache__"))
        return where
    where = tmp / "project"
    where.mkdir()
    shutil.copy(FIXTURES / "tiny.py", where / "tiny.py")
    (where / "pyproject.toml").write_text(PROJECT_TOML)
    return where


def execute(command: str, cwd: Path, timeout: float = 420) -> subprocess.CompletedProcess[str]:
    """Run one documented command line: ``repro-check`` is this checkout's, ``python`` this
    interpreter, ``cd X &&`` moves."""
    argv = shlex.split(command)
    while len(argv) > 2 and argv[0] == "cd" and argv[2] == "&&":
        cwd = cwd / argv[1] if (cwd / argv[1]).is_dir() else cwd  # the copy is fixtures already
        argv = argv[3:]
    if argv[0] == "repro-check":
        argv = [sys.executable, "-m", "repro_check", *argv[1:]]
    elif argv[0] == "python":  # a script of the fixtures, with the interpreter that has torch
        argv = [sys.executable, *argv[1:]]
    elif argv[0] not in SHELL:
        raise AssertionError(f"do not know how to run {command!r}")
    proc = subprocess.Popen(argv, cwd=cwd, env=cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        tree = subprocess.run(["ps", "-o", "pid,stat,etime,wchan:20,args", "-g",
                               str(proc.pid)], capture_output=True, text=True).stdout
        os.killpg(proc.pid, signal.SIGKILL)  # the command and everything it started
        out, err = proc.communicate()
        raise AssertionError(f"{command!r} did not end within {timeout} s; its processes:\n"
                             f"{tree}\n{out[-2000:]}\n{err[-2000:]}") from None
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


RUNS = [cmd for cmd, how in KNOWN.items() if isinstance(how, Run)]


@pytest.mark.slow
@pytest.mark.parametrize("command", RUNS)
def test_documented_command_runs(command: str, tmp_path: Path) -> None:
    how = KNOWN[command]
    assert isinstance(how, Run)
    cwd = folder(how.cwd, tmp_path)
    for step in how.setup:
        res = execute(step, cwd)
        assert res.returncode == 0, f"setup {step!r}: {res.stdout[-2000:]}{res.stderr[-2000:]}"
    res = execute(how.run or command, cwd)
    assert res.returncode in how.codes, (
        f"{how.run or command!r} (for the documented {command!r}) exited {res.returncode}, "
        f"expected {how.codes}:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr


@pytest.mark.parametrize("command", [c for c, how in KNOWN.items() if isinstance(how, Synopsis)])
def test_synopsis_flags_exist(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    from repro_check import cli

    how = KNOWN[command]
    assert isinstance(how, Synopsis)
    argv = ["--help"] if how.command == "check" else [how.command, "--help"]
    assert cli.console_main(argv) == 0
    help_text = capsys.readouterr().out
    for flag in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", command):
        assert flag in help_text, f"{command!r} shows {flag}, which {how.command} --help lacks"


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("command", [c for c, how in KNOWN.items() if isinstance(how, Make)])
def test_make_targets_exist_and_run_what_the_readme_says(command: str) -> None:
    how = KNOWN[command]
    assert isinstance(how, Make)
    target = command.split()[1]
    proc = subprocess.run(["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    for text in how.contains:
        assert text in proc.stdout, f"make {target} no longer runs {text!r}"
