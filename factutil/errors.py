"""Validation errors as readable lines, ``field: message (got VALUE)``, the same on every path
(docs/method.md §8). Imports nothing of factutil: every module may use it."""

from __future__ import annotations

import difflib
import math
import numbers
import reprlib
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import ValidationError

_SHOWN = reprlib.Repr()  # keyword arguments need Python 3.12
_SHOWN.maxlevel = 3
_SHOWN.maxtuple = _SHOWN.maxlist = _SHOWN.maxarray = _SHOWN.maxdict = 4
_SHOWN.maxset = _SHOWN.maxfrozenset = _SHOWN.maxdeque = 4
_SHOWN.maxstring = _SHOWN.maxlong = _SHOWN.maxother = 200


def short(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters with ``...``; built bounded (:mod:`reprlib`), so
    a huge or self-sharing value (a YAML alias bomb) costs no more than a small one."""
    text = _SHOWN.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def number_value(value: Any) -> float | None:
    """``value`` as a float when it is one real number: a Python int or float, a numpy scalar,
    or a 0-d numpy array or torch tensor (what trainers hand over); None for anything else, a
    bool included. An int beyond the float range is ±inf, so a finite check names it."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        if getattr(value, "shape", None) != () or not hasattr(value, "item"):
            return None
        value = value.item()  # a 0-d array or tensor, or a numpy bool
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return None
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


_UNION_TAGS = {"search", "assert", "answer", "invalid", "RawAction"}


def field_path(loc: Iterable[Any], whole: str = "(line)") -> str:
    """``('actions', 2, 'search', 'query')`` -> ``actions[2].query`` (the union tag dropped);
    ``whole`` names the empty location."""
    path = ""
    previous: Any = None
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif not (isinstance(previous, int) and part in _UNION_TAGS):
            path += f".{part}" if path else str(part)
        previous = part
    return path or whole


def close_match(name: Any, known: Sequence[str]) -> str | None:
    """The one of ``known`` closest to ``name`` (difflib) when it is close enough, else None."""
    close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_field_message(name: Any, known: Sequence[str]) -> str:
    """``unknown field 'omgea' (did you mean 'omega'?)``, the closest of ``known`` if any."""
    close = close_match(name, known)
    return f"unknown field {name!r}" + (f" (did you mean {close!r}?)" if close else "")


UNKNOWN_FIELD = "unknown_field"
"""The error type of a pydantic error already worded by :func:`unknown_field_message`."""


def error_messages(
    error: ValidationError, whole: str = "(line)", known: Sequence[str] = ()
) -> list[tuple[str, str]]:
    """(field path, message) per problem of a pydantic error. Pydantic's own messages get
    ``(got VALUE)`` (this library's validators say it already); an unknown top-level key of a
    model whose fields are ``known`` reads as :func:`unknown_field_message`."""
    messages = []
    for item in error.errors(include_url=False):
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "union_tag_not_found":  # pydantic: "Unable to extract tag using ..."
            message = ("missing field `action` (one of search, assert, answer, invalid), "
                       "or `raw` model output to parse")
        if item["type"] == "missing" and item["loc"][-1:] == ("actions",):  # a rollout's
            message = "Field required: the actions, or the whole text as `response`"
        if item["type"] == "extra_forbidden" and len(item["loc"]) == 1 and known:
            message = unknown_field_message(item["loc"][0], known)
        elif item["type"] not in ("missing", "value_error", UNKNOWN_FIELD) and "input" in item:
            message += f" (got {short(item['input'])})"
        messages.append((field_path(item["loc"], whole), message))
    return messages

