"""Plain JSON from dataclasses: one ``to_dict`` derived from the fields, not one written per class.

The JSON keys of a report are a public API, so a field says how it is written when that is not
simply its name and value: :func:`json_field` sets the key (``key=``), leaves it out when None
(``omit_none=True``), leaves it out always (``skip=True``, for what only the code reads), rounds
it (``digits=``), passes it through a function (``convert=``), writes it only when a test of
the whole object holds (``when=``, for keys one kind of report has and another has not), or
writes a nested record's keys in place of the field (``flatten=True``). A class adds computed
keys by naming its properties in ``JSON_PROPERTIES``, and wraps its keys in one object by naming
it in ``JSON_ENVELOPE``. Nested dataclasses, lists, dicts and ``str`` enums become plain JSON the
same way. :func:`merge` joins the parts of a report and refuses a key two parts both write: a
collision would silently drop one of them.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

#: the metadata key under which a field's JSON rules are kept
_RULES = "repro_check.json"


def json_field(*, key: str | None = None, omit_none: bool = False, skip: bool = False,
               digits: int | None = None, convert: Callable[[Any], Any] | None = None,
               when: Callable[[Any], bool] | None = None, flatten: bool = False,
               **field_args: Any) -> Any:
    """A dataclass field with rules for its JSON (see the module's docstring); ``field_args``
    go to :func:`dataclasses.field` (``default``, ``default_factory``, ...)."""
    rules = {"key": key, "omit_none": omit_none, "skip": skip, "digits": digits,
             "convert": convert, "when": when, "flatten": flatten}
    return dataclasses.field(metadata={_RULES: rules}, **field_args)


def plain(value: Any) -> Any:
    """``value`` as plain JSON data: dataclasses by their ``to_dict`` (else their fields), enums
    by their value, lists, tuples and dicts item by item."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        method = getattr(value, "to_dict", None)
        return method() if callable(method) else to_dict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def to_dict(obj: Any) -> dict[str, Any]:
    """The fields of dataclass ``obj`` as a JSON object, by each field's rules, then the
    properties its class names in ``JSON_PROPERTIES``, all in ``JSON_ENVELOPE`` when it names
    one."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        rules = f.metadata.get(_RULES, {})
        if rules.get("skip") or (rules.get("when") is not None and not rules["when"](obj)):
            continue
        value = getattr(obj, f.name)
        if value is None and rules.get("omit_none"):
            continue
        if rules.get("convert") is not None:
            value = rules["convert"](value)
        elif rules.get("digits") is not None and value is not None:
            value = round(value, rules["digits"])
        if rules.get("flatten"):
            out = merge([out, plain(value) if value is not None else {}])
        else:
            out = merge([out, {rules.get("key") or f.name: plain(value)}])
    extra = {name: plain(getattr(obj, name)) for name in getattr(obj, "JSON_PROPERTIES", ())}
    out = merge([out, extra])
    envelope = getattr(obj, "JSON_ENVELOPE", None)
    return {envelope: out} if envelope else out


class JsonRecord:
    """A dataclass whose ``to_dict`` is :func:`to_dict` of its fields."""

    #: properties written after the fields, under their own names
    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ()
    #: the one key the record's keys go under (None: at the top)
    JSON_ENVELOPE: ClassVar[str | None] = None

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


def merge(parts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The keys of every part in one object; a key written by two parts raises ValueError."""
    out: dict[str, Any] = {}
    for part in parts:
        twice = sorted(set(out) & set(part))
        if twice:
            raise ValueError(f"report parts write the same key(s): {', '.join(twice)}")
        out.update(part)
    return out
