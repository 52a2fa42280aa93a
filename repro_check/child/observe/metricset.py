"""The names and the size of a run's final metrics, so that none is lost on the way.

**Names.** Every source has a namespace of its own: what the target returns and what it passes
to ``repro_check.log_metric`` keep their names, the logging libraries' values are ``tb:NAME``,
``lightning:NAME``, ... (:data:`HOOK_PREFIXES`) and what the run prints is ``printed:NAME``
(picked by repro-check from the run's output). A name the target chooses that starts with one of
those prefixes is recorded as ``return:NAME`` or ``log_metric:NAME`` instead; a name both logged
with ``log_metric`` and returned keeps the logged value and records the returned one as
``return:NAME``; two keys of one dict that name the same metric once nested dicts are joined
with ``.`` (``{"a": {"b": 1}, "a.b": 2}``) are ``a.b`` and ``a.b#2``. Each renaming is a warning.
The same name recorded again by the same source keeps its last value (a value logged at every
epoch).

**Size.** A trace line holds at most :data:`~repro_check.trace.format.MAX_LINE_BYTES`; a
metrics line must never come near it. At most :data:`MAX_METRICS` metrics are kept one by one;
beyond that the largest groups (the keys of one nested dict, or names that differ only in their
digits: ``item_0``, ``item_1``, ...) are each folded into one digest metric ``GROUP.*`` of dtype
``digest`` that holds every name and value of the group, and so is still compared (for
equality), never dropped. A name longer than :data:`MAX_NAME` is cut, with a digest of the
whole name.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

#: the prefixes of the logging libraries' metrics (``child.metric_hooks``)
HOOK_PREFIXES = ("tb:", "lightning:", "hf:", "wandb:", "mlflow:", "json:")
#: what a printed metric's name starts with (picked by repro-check, never by the run)
PRINTED_PREFIX = "printed:"
#: sources whose names the target chooses: returned values and ``repro_check.log_metric``
RETURN, LOG_METRIC = "return", "log_metric"
#: prefixes a name the target chooses may not start with (another source's namespace)
RESERVED = (PRINTED_PREFIX, *HOOK_PREFIXES, f"{RETURN}:", f"{LOG_METRIC}:")
#: metrics kept one by one in a run's metrics line; more are folded into digests
MAX_METRICS = 256
#: the longest metric name kept whole
MAX_NAME = 200
#: the dtype of a folded group of metrics (compared on its digest)
DIGEST = "digest"

Warn = Callable[[str], None]


def _digest(data: bytes, size: int = 16) -> str:
    return hashlib.blake2b(data, digest_size=size).hexdigest()


def short_name(name: str) -> str:
    """``name``, cut to :data:`MAX_NAME` characters with a digest of the whole when longer."""
    if len(name) <= MAX_NAME:
        return name
    return f"{name[:MAX_NAME - 20]}...[{_digest(name.encode('utf-8', 'replace'), 4)}]"


class Names:
    """Which source recorded each metric name: the name a new value is recorded under."""

    def __init__(self, warn: Warn) -> None:
        self.warn = warn
        self.source: dict[str, str] = {}
        self.warned: set[str] = set()

    def _once(self, key: str, text: str) -> None:
        if key not in self.warned:
            self.warned.add(key)
            self.warn(text)

    def name_for(self, name: str, source: str) -> str:
        """The name a value of ``source`` given as ``name`` is recorded under (see the module)."""
        name = short_name(name)
        if source in (RETURN, LOG_METRIC) and name.startswith(RESERVED):
            renamed = f"{source}:{name}"
            self._once(f"reserved:{source}:{name}",
                       f"metric {name!r} ({_said(source)}) is recorded as {renamed!r}: names "
                       f"starting with {name.split(':', 1)[0]}: are another source's")
            name = renamed
        owner = self.source.setdefault(name, source)
        if owner != source:
            renamed = f"{source}:{name}"
            self._once(f"both:{name}",
                       f"metric {name!r} was both {_said(owner)} and {_said(source)}: both are "
                       f"compared, the second as {renamed!r}")
            # no other source can make this name: it starts with the source's own prefix
            self.source.setdefault(renamed, source)
            return renamed
        return name


def _said(source: str) -> str:
    return {RETURN: "returned", LOG_METRIC: "logged with repro_check.log_metric"}.get(
        source, f"logged through {source}")


def flatten(logged: Mapping[Any, Any], warn: Warn, what: str) -> list[tuple[str, Any]]:
    """The ``(name, value)`` pairs of a dict of metrics, nested dicts joined with ``.``; two keys
    that join to the same name are both kept (``NAME``, ``NAME#2``), with a warning."""
    out: list[tuple[str, Any]] = []
    seen: dict[str, int] = {}

    def walk(mapping: Mapping[Any, Any], prefix: str, depth: int) -> None:
        for key, value in list(mapping.items()):
            name = f"{prefix}{key}"
            if isinstance(value, Mapping) and depth < 32:
                walk(value, name + ".", depth + 1)
                continue
            count = seen[name] = seen.get(name, 0) + 1
            if count > 1:
                warn(f"{what}: two keys give the metric name {name!r} (nested dicts are joined "
                     f"with '.'): the second is compared as {name}#{count}")
                name = f"{name}#{count}"
            out.append((name, value))

    walk(logged, "", 0)
    return out


def _group_of(name: str) -> str:
    """The group a metric is folded with: its nested dict, else its name without digits."""
    if "." in name:
        return name.rsplit(".", 1)[0] + ".*"
    return re.sub(r"\d+", "#", name)


def fold(metrics: Mapping[str, Any], warn: Warn, limit: int = MAX_METRICS) -> dict[str, Any]:
    """``metrics`` with at most ``limit`` entries: the largest groups folded into one digest
    metric each (every name and value in it), in the order they were recorded; a warning names
    each group folded."""
    if len(metrics) <= limit:
        return dict(metrics)
    groups: dict[str, list[str]] = {}
    for name in metrics:
        groups.setdefault(_group_of(name), []).append(name)
    folded: dict[str, str] = {}  # member -> group
    count = len(metrics)
    for group, members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        if count <= limit or len(members) < 2:
            break
        folded.update(dict.fromkeys(members, group))
        count -= len(members) - 1
    if count > limit:  # no groups to speak of: everything past the first limit - 1 is one
        rest = [n for n in metrics if n not in folded][limit - 1 - len(set(folded.values())):]
        folded.update(dict.fromkeys(rest, "metrics.*"))
    out: dict[str, Any] = {}
    members_of: dict[str, list[str]] = {}
    for name, enc in metrics.items():
        into = folded.get(name)
        if into is None:
            out[name] = enc
            continue
        if into in metrics and into not in folded:
            into = folded[name] = f"{into}#digest"
        if into not in members_of:
            members_of[into] = []
            out[into] = None  # its place in the recording order
        members_of[into].append(name)
    for group, members in members_of.items():
        body = json.dumps([[n, metrics[n]] for n in members], sort_keys=True,
                          separators=(",", ":")).encode("utf-8", "replace")
        bits = _digest(body)
        out[group] = {"dtype": DIGEST, "bits": bits, "value": f"{len(members)} values [{bits[:8]}]"}
        warn(f"{len(members)} metrics ({short_name(members[0])!r}, ...) are compared together as "
             f"one digest, {group!r}: a run records at most {limit} metrics one by one")
    return out
