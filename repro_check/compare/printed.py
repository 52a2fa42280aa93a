"""Metrics from what a run prints: ``Accuracy: 9876/10000``, ``loss = 0.23``, ``--metric NAME=REGEX``.

The scan runs in repro-check, on the run's output pipe as it is read: every byte the run writes
to its stdout and stderr, not only the kept tail, and also what its subprocesses, DataLoader
workers and C extensions write to those file descriptors (wrapping ``sys.stdout`` inside the run
would miss all of these). Lines end at ``\\n`` or ``\\r`` (a progress bar redrawn in place gives
a line each time).

The default rule picks ``NAME: number``, ``NAME = number``, ``NAME number`` and a fraction
``NAME: 9876/10000`` (0.9876) for common metric names (:data:`BASES`, each optionally after one
of :data:`PREFIXES`: ``Average loss``, ``val_acc``, ``test ppl``; ``error`` only after one:
``test error``), case-insensitive, a quote or
``tensor(`` allowed around the number. ``--metric NAME=REGEX`` adds a rule of its own: the
regex's named group ``value`` (else its first group) is the number, searched in every line (in a
process of its own during a run, :mod:`repro_check.compare.scanproc`, so that a regex that never
ends cannot hold up repro-check). Each name keeps its last occurrence and is reported as
``printed:NAME`` (lower case, a prefix joined with ``_``), so it never collides with a returned
metric.

A printed value is compared on its text exactly as printed: a printed float is already rounded,
so two runs that print the same text agree and any difference in the text is a difference. It is
stored as an encoded scalar of dtype ``printed``: ``bits`` is the hex of the text's UTF-8 bytes
(of its 32-byte BLAKE2b digest when longer than 32 bytes), ``value`` the number, ``text`` the text.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from repro_check.errors import UsageError

#: what a printed metric's name starts with in reports and traces
PREFIX = "printed:"
#: the dtype of a printed value (compared on its text)
DTYPE = "printed"
#: metric names the default rule picks (longest first, so ``accuracy`` wins over ``acc``)
BASES = ("accuracy", "accurecy", "acc@1", "acc@5", "acc", "top-1", "top1", "top-5", "top5",
         "loss", "nll", "perplexity", "ppl", "f1", "bleu", "rouge", "auc", "precision",
         "recall", "mse", "mae", "rmse", "miou", "iou", "map", "wer", "cer", "error")
#: base names picked only after a prefix: ``test error: 0.08``, ``top-1 error 23.9``, not a log
#: line's ``error 404``
PREFIX_NEEDED = frozenset({"error"})
#: words a default name may start with: ``test loss``, ``val_acc``, ``Average loss``
PREFIXES = ("training", "train", "validation", "valid", "val", "test", "eval", "average",
            "avg", "mean", "final", "best", "top-1", "top1", "top-5", "top5")
#: how to get a metric compared at all, for reports that compared none
HOW_TO_GET_A_METRIC = (
    "return a number or a dict of them from the function, call repro_check.log_metric, log it "
    "to TensorBoard, Lightning, the HF Trainer, wandb or mlflow, print it as 'accuracy: 0.95', "
    "or pick it from the output with --metric NAME=REGEX")

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf(?:inity)?)(?!\w)"
_NUMBER_RE = re.compile(rf"(?:{_NUMBER})(?:/(?:{_NUMBER}))?", re.IGNORECASE)


def _alternatives(words: Iterable[str]) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


#: the default rule, searched in the output's bytes with ASCII letters in lower case. It starts
#: at the metric's base name: a search for literal words is fast, one that starts with a
#: look-behind or an optional group is not; the prefix and the word boundary are looked for
#: before it apart (:data:`PREFIX_BEFORE`)
DEFAULT_RULE = re.compile(
    rf"(?P<base>{_alternatives(BASES)})(?![\w@-])['\"]?"
    rf"(?:[ \t]*[:=][ \t]*|[ \t]+)['\"]?(?:tensor\()?"
    rf"(?P<value>(?:{_NUMBER.lower()})(?:/(?:{_NUMBER.lower()}))?)(?!\w|\.\d)".encode())
#: a prefix at the end of the text before a base name, and the byte before it (if any)
PREFIX_BEFORE = re.compile(
    rf"(?:^|(?P<before>.))(?P<prefix>{_alternatives(PREFIXES)})[ _-]?$".encode(), re.DOTALL)
#: bytes before a prefix and a base name looked at
_BEFORE = max(map(len, PREFIXES)) + 2
#: a byte that, before a name, makes it part of a longer word
_WORD = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@-")
#: every byte but the digits: a chunk without a digit holds no number, hence no metric
_NOT_DIGITS = bytes(b for b in range(256) if not 0x30 <= b <= 0x39)
#: cheap test for a chunk of output the default rule cannot match: none of these substrings
KEYWORDS = tuple(sorted({w.encode() for w in (
    "acc", "top", "loss", "nll", "perplexity", "ppl", "f1", "bleu", "rouge", "auc",
    "precision", "recall", "mse", "mae", "iou", "map", "wer", "cer", "error")}))
#: longest line scanned whole; a longer one is scanned in pieces that overlap by OVERLAP bytes
MAX_LINE = 64 * 1024
OVERLAP = 256
_NAME = re.compile(r"[A-Za-z0-9_.@/-]{1,100}")


# ---- rules ---------------------------------------------------------------------------------
def _bad(where: str, text: str) -> UsageError:
    return UsageError(f"{where}: {text}" if where else text)


def _rule(name: Any, regex: Any, where: str) -> tuple[str, str]:
    """One ``NAME=REGEX`` rule, checked: a plain name, a regex that compiles with a group."""
    if not isinstance(name, str) or not _NAME.fullmatch(name.strip()):
        raise _bad(where, f"invalid metric name {name!r} (letters, digits and _ . @ / -)")
    if not isinstance(regex, str) or not regex:
        raise _bad(where, f"the regex of metric {name!r} must be a non-empty string")
    try:
        compiled = re.compile(regex)
    except re.error as e:
        raise _bad(where, f"the regex of metric {name!r} does not compile: {e}") from None
    if "value" not in compiled.groupindex and compiled.groups == 0:
        raise _bad(where, f"the regex of metric {name!r} needs a group around the "
                         "number: (...) or (?P<value>...)")
    return name.strip(), regex


def parse_flag(text: str, where: str | None = None) -> tuple[str, str]:
    """``--metric NAME=REGEX`` (or the same text in pyproject.toml) -> ``(NAME, REGEX)``."""
    where = f"--metric {text}" if where is None else where
    name, sep, regex = text.partition("=")
    if not sep:
        raise _bad(where, f"expected NAME=REGEX, got {text!r}")
    return _rule(name, regex, where)


def rules_of(value: Any, where: str = "printed metrics") -> tuple[tuple[str, str], ...]:
    """Rules as given in Python or pyproject.toml: a mapping NAME -> REGEX, a list of
    ``"NAME=REGEX"`` strings or of (NAME, REGEX) pairs. A name given twice keeps its last regex."""
    if value is None:
        return ()
    if isinstance(value, Mapping):
        items = [_rule(k, v, where) for k, v in value.items()]
    elif isinstance(value, (list, tuple)):
        items = []
        for item in value:
            if isinstance(item, str):
                items.append(parse_flag(item, where))
            elif isinstance(item, (list, tuple)) and len(item) == 2:
                items.append(_rule(item[0], item[1], where))
            else:
                raise _bad(where, f"expected NAME=REGEX strings or a table of "
                                 f"NAME = \"REGEX\", got {item!r}")
    else:
        raise _bad(where, f"expected a table of NAME = \"REGEX\" or a list of "
                         f"NAME=REGEX strings, got {value!r}")
    return merge_rules(items)


def merge_rules(*groups: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """The rules of every group in order; a later group's rule replaces an earlier one's name."""
    out: dict[str, str] = {}
    for group in groups:
        for name, regex in group:
            out.pop(name, None)
            out[name] = regex
    return tuple(out.items())


def unmatched(rules: Sequence[tuple[str, str]], found: Sequence[Mapping[str, Any]]) -> list[str]:
    """A warning for each ``--metric`` rule that matched nothing in the output of any run that
    ran to its end (``found``: the printed metrics of each); a rule that matched in some runs
    only needs none: its metric, recorded by some runs only, is a difference."""
    if not found:
        return []
    return [f"--metric {name}: the regex matched no line of any run's output, so nothing was "
            f"compared for printed:{name} (check the regex against what the script prints)"
            for name, _ in rules if not any(PREFIX + name in f for f in found)]


# ---- values --------------------------------------------------------------------------------
def number_of(text: str) -> float | None:
    """The number a printed text stands for (a fraction divided out); None if not a number."""
    if not _NUMBER_RE.fullmatch(text):
        return None
    top, _, bottom = text.partition("/")
    x = float(top)
    if not bottom:
        return x
    y = float(bottom)
    return x / y if y else math.nan


def encode(text: str) -> dict[str, Any] | None:
    """A printed number as an encoded scalar compared on its text; None if not a number."""
    x = number_of(text)
    if x is None:
        return None
    raw = text.encode("utf-8")
    bits = raw.hex() if len(raw) <= 32 else hashlib.blake2b(raw, digest_size=32).hexdigest()
    value: Any = x
    if math.isnan(x) or math.isinf(x):
        value = "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    elif "/" not in text and _is_whole(text):
        value = int(x) if abs(x) < 2**53 else x
    return {"dtype": DTYPE, "bits": bits, "value": value, "text": text}


def _is_whole(text: str) -> bool:
    return text.lstrip("+-").isdigit()


# ---- the scan ------------------------------------------------------------------------------
class Scanner:
    """Reads a run's output as it arrives and keeps the last printed text of each metric.

    ``add`` takes raw chunks in any sizes; ``finish`` scans what is left of the last line and
    returns the metrics, encoded, in the order their names first appeared.
    """

    def __init__(self, rules: Sequence[tuple[str, str]] = (), *, default: bool = True,
                 custom: Iterable[str] = (),
                 on_rule: Callable[[int], None] | None = None) -> None:
        """``default``: whether the default rule runs; ``custom``: names of rules matched
        elsewhere (:mod:`repro_check.compare.scanproc`) the default rule leaves alone;
        ``on_rule(i)``: called before rule ``i`` is searched (which rule is running)."""
        self.rules = [(name, re.compile(regex, re.MULTILINE)) for name, regex in rules]
        self.custom = {name for name, _ in rules} | set(custom)
        self.default = default
        self.on_rule = on_rule
        self.found: dict[str, str] = {}
        #: the number of the scan (a piece of output) each name first appeared in
        self.first: dict[str, int] = {}
        self.scans = 0
        self.partial = b""

    def add(self, chunk: bytes) -> None:
        data = self.partial + chunk if self.partial else chunk
        cut = max(data.rfind(b"\n"), data.rfind(b"\r"))
        if cut < 0:
            if len(data) > MAX_LINE:  # a very long line: scan it in pieces
                self._scan(data)
                data = data[-OVERLAP:]
            self.partial = data
            return
        self.partial = data[cut + 1:]
        self._scan(data[:cut + 1])

    def flush(self) -> None:
        """Scan what is left of the last line."""
        if self.partial:
            self._scan(self.partial)
            self.partial = b""

    def finish(self, timeout: float | None = None) -> dict[str, dict[str, Any]]:
        """The metrics found. ``timeout`` is for the scan in a process of its own
        (:class:`repro_check.compare.scanproc.Remote`); in this process the scan is done."""
        self.flush()
        return encoded(self.found)

    def close(self) -> None:
        """Nothing to release in this process (a :class:`~repro_check.compare.scanproc.Remote`
        kills its process)."""

    def _scan(self, data: bytes) -> None:
        self.scans += 1
        if self.rules:
            text = data.decode("utf-8", errors="replace").replace("\r", "\n")
            for i, (name, rx) in enumerate(self.rules):
                if self.on_rule is not None:
                    self.on_rule(i)
                self._custom(name, rx, text)
        if not self.default:
            return
        lowered = data.lower()
        if not data.translate(None, _NOT_DIGITS) and b"nan" not in lowered \
                and b"inf" not in lowered:
            return  # no number at all (a few ns a byte: long runs of text, bars, blank lines)
        if not any(k in lowered for k in KEYWORDS):
            return
        for m in DEFAULT_RULE.finditer(lowered):
            start = base_start = m.start()
            before = PREFIX_BEFORE.search(lowered, max(0, start - _BEFORE), start)
            prefix = before.group("prefix").decode() if before else None
            if before:
                start = before.start("prefix")
            if start and data[start - 1] in _WORD:
                if not before:
                    continue  # the end of a longer word: my_loss, interval_acc
                prefix, start = None, base_start  # "x_val loss": the prefix is no prefix
                if data[start - 1] in _WORD:
                    continue
            base = m.group("base").decode()
            if prefix is None and base in PREFIX_NEEDED:
                continue
            name = f"{prefix}_{base}" if prefix else base
            if name not in self.custom:
                self._keep(name, data[m.start("value"):m.end("value")].decode())

    def _custom(self, name: str, rx: re.Pattern[str], text: str) -> None:
        """Rule ``rx`` searched in every line of ``text``: a match that runs over a line's end
        is searched again in each line it spans, alone."""
        for m in rx.finditer(text):
            if "\n" in m.group(0):
                first = text.rfind("\n", 0, m.start()) + 1
                last = text.find("\n", m.end())
                for line in text[first:last if last >= 0 else len(text)].split("\n"):
                    self._custom(name, rx, line)
                continue
            value = m.group("value") if "value" in rx.groupindex else m.group(1)
            if value is not None and number_of(value.strip()) is not None:
                self._keep(name, value.strip())

    def _keep(self, name: str, text: str) -> None:
        if name not in self.found:
            self.first[name] = self.scans
        self.found[name] = text  # the last text; the order names first appeared in


def encoded(found: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Each metric's last text (NAME -> text) encoded as ``printed:NAME``; not a number: left."""
    out = {}
    for name, text in found.items():
        enc = encode(text)
        if enc is not None:
            out[PREFIX + name] = enc
    return out
