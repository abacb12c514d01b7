"""Where the actions are in a model text, for :mod:`factutil.parse`: ``{...}`` objects with an
``action`` key, and tag pairs (docs/parsing.md); the work is linear in the text."""

from __future__ import annotations

import ast
import bisect
import json
import re
import warnings
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

MAX_DEPTH = 100
"""Deepest nesting of ``{`` and ``[`` (and ``(`` inside ``<assert>``) that is parsed at all."""

# ast.literal_eval builds a full syntax tree; larger literals are only tried as JSON.
_LITERAL_EVAL_LIMIT = 200_000

# Tag tokens: <search>, </search> ..., verl's <tool_call>, R1-Searcher's <|begin_of_query|> ...
_TAG_TOKEN = re.compile(r"<(/?)(search|assert|answer|tool_call)\s*>|<\|(begin|end)_of_query\|>",
                        re.IGNORECASE)
_ACTION_KEY = re.compile(r"""(["'])action\1\s*:""")
_BRACES = re.compile(r"\{+")
# A whole string literal (to the first quote no backslash escapes; possessive, so linear), else
# a quote that opens one never closed, else one character the scan looks for.
_DOUBLE_QUOTED = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
_QUOTED = _DOUBLE_QUOTED + r"""|'[^'\\]*+(?:\\.[^'\\]*+)*+'"""
_STRUCTURAL = re.compile(_QUOTED + r"""|[{}\[\]"']""", re.DOTALL)  # brackets and quotes
_NESTING = re.compile(_QUOTED + r"""|[{}\[\]()"']""", re.DOTALL)
_TRAILING_COMMA_OR_QUOTE = re.compile(_DOUBLE_QUOTED + r'|"|,(?=\s*[}\]])', re.DOTALL)


class Number(str):
    """A JSON number as its literal text (``2.50`` stays ``"2.50"``): an answer or a triple part
    keeps the digits written, and no integer is too long to read. :mod:`factutil.parse` tells
    it from a JSON string where a string is required (a query, an action name)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str.__str__(self)  # shown as the model wrote it: 42, not '42'


def _not_json(constant: str) -> Any:
    raise Rejected(f"not JSON: {constant} is not a JSON value")


class Rejected(Exception):
    """The text names an action but its content is not acceptable; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Item:
    """A stretch of the text that is (or was meant to be) one action."""

    start: int
    end: int  # exclusive
    kind: str  # "tag", "json" or "truncated"
    name: str = ""  # tag name
    inner: tuple[int, int] = (0, 0)  # a tag's content span
    depth: int = 0  # a JSON object's nesting depth
    reason: str = ""  # already known to be invalid, and why


def select(items: list[Item]) -> list[Item]:
    """Items in text order, dropping any that starts inside an earlier one."""
    selected: list[Item] = []
    reach = -1
    for item in sorted(items, key=lambda item: (item.start, -item.end)):
        if item.start < reach:
            continue
        selected.append(item)
        reach = item.end
    return selected


def json_items(text: str) -> list[Item]:
    """Closed and truncated ``{...}`` objects whose top level has an ``action`` key."""
    key_starts = [match.start() for match in _ACTION_KEY.finditer(text)]
    if not key_starts:
        return []
    keys = set(key_starts)
    last_key = key_starts[-1]
    structural = sum(text.count(char) for char in "{}[]\"'")
    budget = [3 * structural + 1000]
    closed: dict[int, tuple[int, bool, int]] = {}
    truncated: dict[int, str] = {}
    covered: set[int] = set()
    pos = 0
    while budget[0] > 0:
        start = text.find("{", pos)
        if start < 0 or start > last_key:
            break
        if start in covered:  # inside an object already scanned: skip the covered run at once
            pos = start + 1
            while pos in covered:
                pos += 1
            continue
        end = _scan_object(text, start, keys, closed, truncated, covered, budget)
        # A closed object is read whole; after an unclosed one, braces it saw inside strings may
        # still start objects of their own (a stray "{" or apostrophe in prose).
        pos = end if end > 0 else start + 1
    items = [Item(start, end, "json", depth=depth)
             for start, (end, keyed, depth) in closed.items() if keyed]
    return items + [Item(start, len(text), "truncated", reason=reason)
                    for start, reason in truncated.items()]


def _scan_object(
    text: str, start: int, keys: set[int], closed: dict[int, tuple[int, bool, int]],
    truncated: dict[int, str], covered: set[int], budget: list[int],
) -> int:
    """Scan the object opening at ``text[start]``, recording every object met; the index just
    past its closing brace, or -1 when the text (or budget) ends first. ``closed`` gets
    ``start -> (end, has top-level action key, nesting depth)``."""
    # stack entries: [opener, position, deepest stack length while open, has action key]
    stack: list[list[Any]] = []
    pos = start
    in_string = False
    while True:
        budget[0] -= 1
        if budget[0] < 0:
            return -1
        match = _STRUCTURAL.search(text, pos)
        if match is None:
            break
        at = match.start()
        char = text[at]
        if char in "\"'":
            if stack and stack[-1][0] == "{" and at in keys:
                stack[-1][3] = True
            if match.end() == at + 1:  # a string never closed
                in_string = True
                break
            pos = match.end()
            continue
        pos = at + 1
        if char == "{":
            # A run of opening braces is pushed at once (a megabyte of "{" stays linear and fast):
            # as many as the budget allows, each one step, as one at a time would.
            run = min(_BRACES.match(text, at).end() - at - 1, budget[0])
            budget[0] -= run
            depth = len(stack)
            stack.extend(["{", at + k, depth + k + 1, False] for k in range(run + 1))
            covered.update(range(at, at + run + 1))
            pos = at + run + 1
        elif char == "[":
            stack.append([char, at, len(stack) + 1, False])
        elif char == "]":
            if stack and stack[-1][0] == "[":
                _pop(stack)
        else:
            while True:
                entry = _pop(stack)
                if entry[0] == "{":
                    break
            base = len(stack)
            closed[entry[1]] = (at + 1, entry[3], entry[2] - base)
            if not stack:
                return at + 1
    reason = f"truncated JSON: unterminated {'string' if in_string else 'object'}"
    for entry in stack:
        if entry[0] == "{" and entry[3]:
            truncated.setdefault(entry[1], reason)
    return -1


def _pop(stack: list[list[Any]]) -> list[Any]:
    entry = stack.pop()
    if stack and entry[2] > stack[-1][2]:
        stack[-1][2] = entry[2]
    return entry


def _outside_strings(
    text: str, pattern: re.Pattern[str], pos: int = 0, budget: list[int] | None = None
) -> Iterator[int]:
    """Where ``pattern`` (which matches whole string literals too) matches outside them, from
    ``pos`` until the text, an unterminated string or the ``budget`` (one per match) ends."""
    for match in pattern.finditer(text, pos):
        if budget is not None:
            budget[0] -= 1
            if budget[0] < 0:
                return
        if text[match.start()] not in "\"'":
            yield match.start()
        elif match.end() == match.start() + 1:  # a string never closed
            return


def _nesting_depth(text: str) -> int:
    """Deepest bracket nesting outside strings; stops counting once past MAX_DEPTH."""
    depth = deepest = 0
    for at in _outside_strings(text, _NESTING):
        if text[at] in "{[(":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    return deepest
        elif depth:
            depth -= 1
    return deepest


def load(chunk: str, checked: bool = False) -> Any:
    """JSON (``strict=False``; numbers as :class:`Number`, ``NaN``/``Infinity`` refused), else a
    Python literal; raises Rejected with the JSON error. Depth is guarded. Trailing commas are
    dropped before decoding, so a comma never sends JSON to the Python-literal reader (where
    ``"\\/"`` and ``null`` mean something else)."""
    if not checked and _nesting_depth(chunk) > MAX_DEPTH:
        raise Rejected(f"JSON nested deeper than {MAX_DEPTH} levels")
    try:
        return _loads(chunk)
    except json.JSONDecodeError as error:
        problem = _json_problem(error)
    except (ValueError, RecursionError) as error:
        problem = str(error)
        problem = problem if len(problem) <= 60 else problem[:57] + "..."
    if (trimmed := _without_trailing_commas(chunk)) != chunk:
        with suppress(ValueError, RecursionError):
            return _loads(trimmed)
    if len(chunk) <= _LITERAL_EVAL_LIMIT and (checked or _nesting_depth(chunk) <= MAX_DEPTH):
        # An invalid escape in model text ("\)") warns, and raises under -W error: the parse
        # must not depend on the process's warning filters, nor fill a training log.
        with (suppress(ValueError, TypeError, SyntaxError, MemoryError, RecursionError),
              warnings.catch_warnings()):
            warnings.simplefilter("ignore")
            return ast.literal_eval(chunk)
    raise Rejected(f"malformed JSON: {problem}")


def _loads(chunk: str) -> Any:
    return json.loads(chunk, strict=False, parse_int=Number, parse_float=Number,
                      parse_constant=_not_json)


def _json_problem(error: json.JSONDecodeError) -> str:
    # Some decoder messages already end in "at" ("Invalid control character at").
    return f"{error.msg.removesuffix(' at')} at char {error.pos}"


def _without_trailing_commas(chunk: str) -> str:
    """``chunk`` without the commas before ``}`` or ``]`` outside strings (the text from an
    unterminated string on kept)."""
    cuts = [-1, *_outside_strings(chunk, _TRAILING_COMMA_OR_QUOTE), len(chunk)]
    return "".join(chunk[start + 1 : end] for start, end in pairwise(cuts))


def tag_items(text: str, json_items: list[Item]) -> tuple[list[Item], list[tuple[int, str]]]:
    """Complete tag pairs, and (position, reason) of open tags never closed."""
    # A truncated object does not hide the tags after it: "<search>{"action": </search>" is a
    # complete search whose query happens to look like JSON.
    spans = select([item for item in json_items if item.kind == "json"])
    span_starts = [item.start for item in spans]
    tokens = []
    for match in _TAG_TOKEN.finditer(text):
        index = bisect.bisect_right(span_starts, match.start()) - 1
        if index >= 0 and match.start() < spans[index].end:
            continue  # inside a JSON action, e.g. in its query string
        close, name = ((match[3].lower() == "end", "search") if match[3]  # R1-Searcher's query
                       else (bool(match[1]), match[2].lower()))
        tokens.append((match.start(), match.end(), close, name))
    tokens = _outside_assert_values(text, tokens)

    items: list[Item] = []
    stack: list[int] = []
    open_count = dict.fromkeys(("search", "assert", "answer", "tool_call"), 0)
    unclosed: list[int] = []
    for index, (_, _, is_close, name) in enumerate(tokens):
        if not is_close:
            stack.append(index)
            open_count[name] += 1
            continue
        if not open_count[name]:
            continue  # a stray close tag
        while True:
            opened = stack.pop()
            open_count[tokens[opened][3]] -= 1
            if tokens[opened][3] == name:
                break
            unclosed.append(opened)
        reason = ""
        if index - opened > 1:
            _, _, inner_close, inner_name = tokens[opened + 1]
            shown = f"</{inner_name}>" if inner_close else f"<{inner_name}>"
            reason = f"nested {shown} tag inside <{name}>"
        inner = (tokens[opened][1], tokens[index][0])
        items.append(Item(tokens[opened][0], tokens[index][1], "tag", name, inner, reason=reason))
    unclosed.extend(stack)
    failures = [(tokens[index][0], f"unclosed <{tokens[index][3]}> tag") for index in unclosed]
    return items, failures


_FENCE = re.compile(r"\s*(?:```[^\n]*\n)?\s*")


def _outside_assert_values(text: str, tokens: list[tuple[int, int, bool, str]]
                           ) -> list[tuple[int, int, bool, str]]:
    """``tokens`` less those inside the JSON value opening an ``<assert>``'s content (after space
    or a code fence): ``<assert>[["tag", "closes", "</answer>"]]</assert>`` holds text, not a
    nested tag. A value that never closes hides nothing."""
    budget = [3 * sum(text.count(char) for char in "{}[]\"'") + 1000]
    kept: list[tuple[int, int, bool, str]] = []
    hidden_until = -1
    for token in tokens:
        start, end, is_close, name = token
        if start < hidden_until:
            continue
        kept.append(token)
        if name == "assert" and not is_close and budget[0] > 0:
            value = _FENCE.match(text, end).end()
            if text[value : value + 1] in ("[", "{"):
                hidden_until = _value_end(text, value, budget)
    return kept


def _value_end(text: str, start: int, budget: list[int]) -> int:
    """Index just past the bracket closing ``text[start]``; -1 when the text (or budget) ends
    first or a bracket closes the wrong opener."""
    stack: list[str] = []
    for at in _outside_strings(text, _STRUCTURAL, start, budget):
        char = text[at]
        if char in "[{":
            stack.append("]" if char == "[" else "}")
        elif not stack or stack.pop() != char:
            return -1
        elif not stack:
            return at + 1
    return -1

