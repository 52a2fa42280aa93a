"""Which metric names are timing or memory figures: values that differ in every run (steps per
second, elapsed seconds, model FLOPs utilisation, memory in use) and say nothing about whether
the training is reproducible. Such a metric is recorded, shown and listed as not compared; a
per-name tolerance (``--atol metric:NAME=0``) or a ``--metric NAME=REGEX`` rule of that name
has it compared.

The rule reads the name's words, not a list of names. A name is split at ``/`` and ``.``; its
last part (the leaf) into words at ``_``, ``-``, spaces, digits and camelCase. Trailing words
that only qualify a quantity (``avg``, ``mean``, ``total``, ``max``, a unit such as ``ms``,
Lightning's ``_epoch`` and ``_step``) are set aside. The name is a timing or memory figure when

- a word of the leaf is one only throughput, time and memory figures use: ``sps``, ``fps``,
  ``throughput``, ``runtime``, ``mfu``, ``tflops``, ``mem``, ``memory``, ``vram``, ``rss``;
- or the leaf's last word is a time: ``time``, ``elapsed``, ``duration``, ``timestamp``,
  ``seconds``, ``latency``, ... (``epoch_time``, ``data_time``, ``time_elapsed``; not
  ``val_time_series_acc``, whose last word is ``acc``, nor ``total_timesteps``);
- or the leaf is only ``rate``, ``dt``, ``speed`` or ``eta`` (timm's ``rate``, nanoGPT's ``dt``;
  not ``learning_rate``);
- or it is a rate per unit of time or a time per unit of work: ``samples_per_second``,
  ``tokens_per_sec``, ``sec_per_iter``, ``time_per_step``, ``it/s``, ``samples/s``.

Checked on the names logged by the PyTorch examples, CleanRL, Lightning, the HF Trainer,
nanoGPT, timm and Stable-Baselines3 (tests/compare/test_timing.py).
"""

from __future__ import annotations

import re

#: words only throughput, time and memory figures use, anywhere in the leaf
ANYWHERE = frozenset({"sps", "fps", "tps", "throughput", "runtime", "mfu", "tflops", "gflops",
                      "mem", "memory", "vram", "rss", "walltime", "wallclock"})
#: words that make a time of the leaf when they are its last word
LAST = frozenset({"time", "times", "elapsed", "duration", "durations", "timestamp", "timestamps",
                  "seconds", "secs", "latency", "clock"})
#: words that are a time or a throughput when they are the whole leaf
ALONE = frozenset({"rate", "dt", "speed", "eta", "sec", "s", "ms"})
#: words after a quantity that qualify it (statistics, units): set aside at the leaf's end
QUALIFIERS = frozenset({"avg", "mean", "total", "sum", "max", "min", "median", "std", "last",
                        "p50", "p90", "p95", "p99", "ms", "us", "ns", "s", "sec", "secs",
                        "seconds", "m", "mins", "h", "hr", "hrs", "hours", "gb", "mb", "gib",
                        "mib", "kb", "epoch", "step"})
#: units of time, for a rate per unit of time
TIME_UNITS = frozenset({"s", "sec", "secs", "second", "seconds", "ms", "min", "minute",
                        "minutes", "h", "hr", "hour", "hours"})
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
#: ``it/s``, ``samples/s``, ``s/it``: a rate written with a slash
_SLASH_RATE = re.compile(r"(?:^|[^a-z])(?:it|its|iter|iters|samples?|steps?|tokens?|toks?|imgs?|"
                         r"images?|ex|examples?|batch(?:es)?|frames?)/s(?:ec)?$"
                         r"|(?:^|[^a-z])s/it(?:er)?$", re.IGNORECASE)


def words(text: str) -> list[str]:
    """The words of a name part, in lower case: ``trainSamplesPerSecond`` -> train, samples,
    per, second; ``SPS`` -> sps."""
    return [w.lower() for w in _WORDS.findall(text)]


def is_timing(name: str) -> bool:
    """Whether metric ``name`` (with or without its source prefix, ``tb:charts/SPS``) is a
    timing or memory figure (see the module)."""
    bare = name.split(":", 1)[1] if ":" in name.split("/", 1)[0] else name
    if _SLASH_RATE.search(bare):
        return True
    leaf = re.split(r"[/.]", bare.rstrip("/."))[-1] if bare.strip("/.") else bare
    ws = words(leaf)
    if not ws:
        return False
    if ANYWHERE.intersection(ws):
        return True
    for i, w in enumerate(ws):  # X_per_second, sec_per_iter
        if w == "per" and ((i + 1 < len(ws) and ws[i + 1] in TIME_UNITS)
                           or (i > 0 and ws[i - 1] in TIME_UNITS | LAST)):
            return True
    core = list(ws)
    while len(core) > 1 and core[-1] in QUALIFIERS:
        core.pop()
    if core[-1] in LAST:
        return True
    return len(core) == 1 and core[0] in ALONE
