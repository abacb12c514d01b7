"""Model text -> actions (docs/method.md §1; the ``raw`` items of docs/method.md §8).

:func:`parse_action` reads one model response and returns a :class:`~factutil.schema.SearchAction`,
:class:`~factutil.schema.AssertAction`, :class:`~factutil.schema.AnswerAction` or, for anything it
cannot read, an :class:`~factutil.schema.InvalidAction` holding the raw text and a short reason. It
never raises for a ``str`` input: a format error is a penalised action, not a crash of training.
The input is only the model's response; no prompt is ever read.

Forms accepted
--------------
JSON objects with an ``"action"`` key, anywhere in the text (inside code fences, between prose)::

    {"action": "search", "query": "..."}
    {"action": "assert", "facts": [["s", "r", "o"], ...]}     # or "triples"; a triple may also be
                                                              # {"subject", "relation", "object"}
    {"action": "answer", "answer": "..."}

JSON is decoded as ``json.loads(strict=False)`` decodes it: a real newline or tab inside a string
(LLMs emit them) is kept. A trailing comma before ``}`` or ``]`` is tolerated by dropping it
(outside strings) before decoding, so it never changes what the rest means. A single-quoted Python
dict is read with :func:`ast.literal_eval` when ``json`` fails (never ``eval``). The action name is matched case-insensitively after stripping; other keys of the object
(``"thought"``, even ``"observation"``) are dropped: the observation comes only from the caller.
An object is found by a balanced-brace scanner that honours ``"..."`` and ``'...'`` strings and
backslash escapes, so braces inside strings never end an object early.

Tags: ``<search>query</search>``, ``<answer>text</answer>``, ``<assert>content</assert>``
(tag names case-insensitive). The content of ``<assert>`` is either

- JSON (or a Python literal): a list of triples, one triple (a 3-list or a dict), or an object with
  ``facts``/``triples``; optionally inside a ````` code fence; or
- one triple per line, as ``s | r | o`` or ``(s, r, o)``; a line may start with a bullet (``-``,
  ``*``, ``•``, ``1.``); a parenthesised line is read as a Python tuple first, so quoted parts may
  hold commas (``("Paris, France", "is in", "Europe")``), else it is split on commas. A line may
  also be a JSON list.

Values
------
Queries, answers and triple parts are stripped of surrounding whitespace. An empty or whitespace
query is invalid; an empty answer is a valid ``AnswerAction(answer="")``. A number given as the
answer or as a triple part is converted with ``str()`` (``42`` -> ``"42"``); a boolean, null, list
or object there is invalid; a query must be a string. Assert content follows
:func:`factutil.schema._assert_content_problem` ("assert with no triple", "triple 1 has 2 parts,
expected 3", "triple 0 has an empty object"), which is consulted first.

Several actions in one response
-------------------------------
Every *complete* action in the text is a candidate: a closed tag pair, or a closed ``{...}`` whose
top level has an ``"action"`` key. Candidates are taken left to right and one that starts inside an
earlier candidate is part of it (a tag inside a JSON string, JSON inside a tag's content), so they
never overlap. Then:

1. if some candidate is a valid answer, the **last valid answer** wins;
2. otherwise the **last candidate** decides, valid or not (e.g. a final empty ``<search></search>``
   makes the response invalid).

Incomplete pieces are not candidates. A ``{`` with a top-level ``"action"`` key that never closes is
*truncated JSON*: it swallows the rest of the text (nothing after it counts, unless it sits inside a
tag pair that opened before it), and the response is invalid ("truncated JSON: unterminated
string") unless a complete action precedes it. Tags pair
like XML: a close tag closes the most recent open tag of its name; an open tag never closed is
ignored (a model often *mentions* ``<search>`` in prose) and is reported as "unclosed <answer> tag"
only when no complete action exists. A pair whose content holds another action tag is one invalid
candidate ("nested <search> tag inside <answer>"). When nothing is found the reason is the first
failure in the text, or "no action found".

Limits
------
Nesting deeper than :data:`MAX_DEPTH` levels is refused before ``json``/``ast`` see it ("JSON
nested deeper than 100 levels"), so 10,000-deep input returns invalid, never ``RecursionError``.
Scanning is linear: an object met outside a string is scanned once, whatever frame met it; a
``{`` inside a string of an unclosed object gets a scan of its own (a stray ``{`` or apostrophe in
prose must not hide a later action), and the total scanning work is capped at three times the
text's count of brace, bracket and quote characters (a pathological text is read only as far as the
cap). JSON scanning is skipped outright when no ``"action":`` key occurs. Regular expressions here
have no nested quantifiers. A megabyte of text parses in well under a second, a pathological
megabyte (all ``{``) in about one. Lone surrogates and other odd Unicode pass through unchanged.
"""

from __future__ import annotations

import ast
import bisect
import json
import re
import warnings
from dataclasses import dataclass
from typing import Any

from factutil.actions import (
    TRIPLE_PARTS,
    AnswerAction,
    AssertAction,
    InvalidAction,
    SearchAction,
    Triple,
    _assert_content_problem,
)
from factutil.errors import short

MAX_DEPTH = 100
"""Deepest nesting of ``{`` and ``[`` (and ``(`` inside ``<assert>``) that is parsed at all."""

ParsedAction = SearchAction | AssertAction | AnswerAction | InvalidAction

# ast.literal_eval builds a full syntax tree; larger literals are only tried as JSON.
_LITERAL_EVAL_LIMIT = 200_000

_TAG_TOKEN = re.compile(r"<(/?)(search|assert|answer)\s*>", re.IGNORECASE)
_ACTION_KEY = re.compile(r"""(["'])action\1\s*:""")
_STRUCTURAL = re.compile(r"""[{}\[\]"']""")
_NESTING = re.compile(r"""[{}\[\]()"']""")
_TRAILING_COMMA_OR_QUOTE = re.compile(r'"|,(?=\s*[}\]])')
_BULLET = re.compile(r"(?:[-*\u2022]|\d{1,3}[.)])\s+")
_OPENERS = "{[("


class _Rejected(Exception):
    """Internal: the text names an action but its content is not acceptable."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_action(text: str, observation: str | None = None) -> ParsedAction:
    """Parse one model response into an action (docs/method.md §1; the ``raw`` input items of docs/method.md §8).

    Args:
        text: the model's response, as generated (prose, code fences and all). Only this text is
            read, never the prompt.
        observation: the retriever's output for this turn, if any. It is attached to the result
            when the text parses as a ``search`` (and kept on an ``InvalidAction``); it is dropped
            for ``assert`` and ``answer``.

    Returns:
        A ``SearchAction``, ``AssertAction`` or ``AnswerAction``; or ``InvalidAction(raw=text,
        reason=...)`` with a short reason ("no action found", "truncated JSON: unterminated
        object", "unknown action 'lookup'", "search with an empty query", ...). The accepted forms
        and the rule for several actions in one text are in the module docstring.

    Raises:
        TypeError: ``text`` is not a ``str``, or ``observation`` is neither a ``str`` nor None.
            No other exception escapes for any ``str`` input.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if observation is not None and not isinstance(observation, str):
        raise TypeError(f"observation must be a str or None, got {type(observation).__name__}")
    try:
        return _parse(text, observation)
    except _Rejected as rejected:
        return InvalidAction(raw=text, reason=rejected.reason, observation=observation)
    except (RecursionError, MemoryError, ValueError) as error:  # pragma: no cover - last resort
        reason = f"unparseable text ({type(error).__name__})"
        return InvalidAction(raw=text, reason=reason, observation=observation)


# --- candidates -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Item:
    """A stretch of the text that is (or was meant to be) one action."""

    start: int
    end: int  # exclusive
    kind: str  # "tag", "json" or "truncated"
    name: str = ""  # tag name
    inner: tuple[int, int] = (0, 0)  # a tag's content span
    depth: int = 0  # a JSON object's nesting depth
    reason: str = ""  # already known to be invalid, and why


def _parse(text: str, observation: str | None) -> ParsedAction:
    json_items = _json_items(text)
    tag_items, unclosed = _tag_items(text, json_items)
    selected = _select(json_items + tag_items)
    complete = [item for item in selected if item.kind != "truncated"]
    if not complete:
        failures = [(item.start, item.reason) for item in selected] + unclosed
        reason = min(failures)[1] if failures else "no action found"
        raise _Rejected(reason)
    try:
        last: ParsedAction | _Rejected = _evaluate(text, complete[-1], observation)
    except _Rejected as rejected:
        last = rejected
    if isinstance(last, AnswerAction):
        return last
    for item in reversed(complete[:-1]):
        if item.kind == "tag" and item.name != "answer":
            continue
        try:
            action = _evaluate(text, item, observation)
        except _Rejected:
            continue
        if isinstance(action, AnswerAction):
            return action
    if isinstance(last, _Rejected):
        raise last
    return last


def _select(items: list[_Item]) -> list[_Item]:
    """Items in text order, dropping any that starts inside an earlier one."""
    selected: list[_Item] = []
    reach = -1
    for item in sorted(items, key=lambda item: (item.start, -item.end)):
        if item.start < reach:
            continue
        selected.append(item)
        reach = item.end
    return selected


def _evaluate(text: str, item: _Item, observation: str | None) -> ParsedAction:
    """The action an item stands for; raises _Rejected when it is invalid."""
    if item.reason:
        raise _Rejected(item.reason)
    if item.kind == "tag":
        return _from_tag(item.name, text[item.inner[0] : item.inner[1]], observation)
    if item.depth > MAX_DEPTH:
        raise _Rejected(f"JSON nested deeper than {MAX_DEPTH} levels")
    value = _load(text[item.start : item.end], checked=True)
    if not isinstance(value, dict) or "action" not in value:
        raise _Rejected("malformed JSON: no top-level 'action' key")
    return _from_mapping(value, observation)


# --- JSON objects ---------------------------------------------------------------------------


def _json_items(text: str) -> list[_Item]:
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
        if start in covered:
            pos = start + 1
            continue
        end = _scan_object(text, start, keys, closed, truncated, covered, budget)
        # A closed object is read whole; after an unclosed one, braces it saw inside strings may
        # still start objects of their own (a stray "{" or apostrophe in prose).
        pos = end if end > 0 else start + 1
    items = [
        _Item(start, end, "json", depth=depth)
        for start, (end, keyed, depth) in closed.items()
        if keyed
    ]
    items += [
        _Item(start, len(text), "truncated", reason=reason) for start, reason in truncated.items()
    ]
    return items


def _scan_object(
    text: str,
    start: int,
    keys: set[int],
    closed: dict[int, tuple[int, bool, int]],
    truncated: dict[int, str],
    covered: set[int],
    budget: list[int],
) -> int:
    """Scan the object opening at ``text[start]``; record every object met on the way.

    Returns the index just past the closing brace, or -1 when the text ends first (or the budget
    runs out). ``closed`` gets ``start -> (end, has top-level action key, nesting depth)``.
    """
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
            after = _string_end(text, at)
            if after < 0:
                in_string = True
                break
            pos = after
            continue
        pos = at + 1
        if char in "{[":
            if char == "{":
                covered.add(at)
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
    reason = "truncated JSON: unterminated string" if in_string else (
        "truncated JSON: unterminated object"
    )
    for entry in stack:
        if entry[0] == "{" and entry[3]:
            truncated.setdefault(entry[1], reason)
    return -1


def _pop(stack: list[list[Any]]) -> list[Any]:
    entry = stack.pop()
    if stack and entry[2] > stack[-1][2]:
        stack[-1][2] = entry[2]
    return entry


def _string_end(text: str, start: int) -> int:
    """Index just past the string literal opened by the quote at ``text[start]``; -1 if none."""
    quote = text[start]
    pos = start + 1
    while True:
        close = text.find(quote, pos)
        if close < 0:
            return -1
        back = close - 1
        while back > start and text[back] == "\\":
            back -= 1
        if (close - 1 - back) % 2 == 0:
            return close + 1
        pos = close + 1


def _nesting_depth(text: str) -> int:
    """Deepest bracket nesting outside strings; stops counting once past MAX_DEPTH."""
    depth = deepest = 0
    pos = 0
    while True:
        match = _NESTING.search(text, pos)
        if match is None:
            return deepest
        at = match.start()
        char = text[at]
        if char in "\"'":
            after = _string_end(text, at)
            if after < 0:
                return deepest
            pos = after
            continue
        pos = at + 1
        if char in _OPENERS:
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    return deepest
        elif depth:
            depth -= 1


def _load(chunk: str, checked: bool = False) -> Any:
    """JSON, else a Python literal; raises _Rejected with the JSON error. Depth is guarded.

    JSON is read as ``json.loads(strict=False)`` reads it (a real newline or tab inside a string is
    kept), and trailing commas outside strings are tolerated by dropping them before decoding, so
    a comma never sends a JSON text to the Python-literal reader (where ``"\\/"`` and ``null``
    mean something else).
    """
    if not checked and _nesting_depth(chunk) > MAX_DEPTH:
        raise _Rejected(f"JSON nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(chunk, strict=False)
    except json.JSONDecodeError as error:
        problem = _json_problem(error)
    except (ValueError, RecursionError) as error:
        problem = _clip(str(error))
    trimmed = _without_trailing_commas(chunk)
    if trimmed != chunk:
        try:
            return json.loads(trimmed, strict=False)
        except (ValueError, RecursionError):
            pass
    if len(chunk) <= _LITERAL_EVAL_LIMIT and (checked or _nesting_depth(chunk) <= MAX_DEPTH):
        try:
            # An invalid escape in model text ("\)") warns, and raises under -W error: the parse
            # must not depend on the process's warning filters, nor fill a training log.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return ast.literal_eval(chunk)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            pass
    raise _Rejected(f"malformed JSON: {problem}")


def _json_problem(error: json.JSONDecodeError) -> str:
    # Some decoder messages already end in "at" ("Invalid control character at").
    return f"{error.msg.removesuffix(' at')} at char {error.pos}"


def _without_trailing_commas(chunk: str) -> str:
    """``chunk`` with every comma that is followed (after whitespace) by ``}`` or ``]`` dropped,
    outside double-quoted strings; the text from an unterminated string on is kept as it is."""
    kept: list[str] = []
    copied = pos = 0
    while True:
        match = _TRAILING_COMMA_OR_QUOTE.search(chunk, pos)
        if match is None:
            break
        at = match.start()
        if chunk[at] == '"':
            pos = _string_end(chunk, at)
            if pos < 0:
                break
            continue
        kept.append(chunk[copied:at])
        copied = pos = at + 1
    kept.append(chunk[copied:])
    return "".join(kept)


# --- tags -----------------------------------------------------------------------------------


def _tag_items(text: str, json_items: list[_Item]) -> tuple[list[_Item], list[tuple[int, str]]]:
    """Complete tag pairs, and (position, reason) of open tags never closed."""
    # A truncated object does not hide the tags after it: "<search>{"action": </search>" is a
    # complete search whose query happens to look like JSON.
    spans = _select([item for item in json_items if item.kind == "json"])
    span_starts = [item.start for item in spans]
    tokens = []
    for match in _TAG_TOKEN.finditer(text):
        index = bisect.bisect_right(span_starts, match.start()) - 1
        if index >= 0 and match.start() < spans[index].end:
            continue  # inside a JSON action, e.g. in its query string
        tokens.append((match.start(), match.end(), bool(match.group(1)), match.group(2).lower()))

    items: list[_Item] = []
    stack: list[int] = []
    open_count = {"search": 0, "assert": 0, "answer": 0}
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
        start, inner_start = tokens[opened][0], tokens[opened][1]
        inner_end, end = tokens[index][0], tokens[index][1]
        reason = ""
        if index - opened > 1:
            _, _, inner_close, inner_name = tokens[opened + 1]
            shown = f"</{inner_name}>" if inner_close else f"<{inner_name}>"
            reason = f"nested {shown} tag inside <{name}>"
        items.append(
            _Item(start, end, "tag", name=name, inner=(inner_start, inner_end), reason=reason)
        )
    unclosed.extend(stack)
    failures = [(tokens[index][0], f"unclosed <{tokens[index][3]}> tag") for index in unclosed]
    return items, failures


def _from_tag(name: str, content: str, observation: str | None) -> ParsedAction:
    if name == "search":
        return _search(content, observation)
    if name == "answer":
        return AnswerAction(answer=content.strip())
    return _assert(_tag_triples(content))


def _tag_triples(content: str) -> Any:
    """The triples written inside ``<assert>``: JSON/Python literal, or one per line."""
    body = _strip_fence(content.strip())
    if not body:
        raise _Rejected("assert with no triple")
    if body[0] in "[{":
        try:
            return _triples_of(_load(body))
        except _Rejected as whole:
            try:
                return _line_triples(body)
            except _Rejected:
                raise whole from None
    return _line_triples(body)


def _triples_of(value: Any) -> Any:
    if isinstance(value, dict):
        if "triples" in value or "facts" in value:
            return value["triples"] if "triples" in value else value["facts"]
        return [value]
    if isinstance(value, (list, tuple)) and value and not any(
        isinstance(part, (list, tuple, dict)) for part in value
    ):
        return [value]  # one flat triple
    return value


def _line_triples(body: str) -> list[Any]:
    triples = []
    for line in body.splitlines():
        line = line.strip()
        if not line:
            continue
        bullet = _BULLET.match(line)
        if bullet:
            line = line[bullet.end() :]
        triples.append(_line_triple(line, len(triples)))
    if not triples:
        raise _Rejected("assert with no triple")
    return triples


def _line_triple(line: str, index: int) -> Any:
    if line[:1] in "[{":
        value = _load(line)
        if isinstance(value, (list, tuple, dict)):
            return value
        raise _Rejected(f"triple {index} is not a list or object: {short(line, 40)}")
    if line.startswith("(") and line.endswith(")"):
        try:
            value = _load(line)
        except _Rejected:
            value = None
        if isinstance(value, tuple):
            return value
        return line[1:-1].split(",")
    if "|" in line:
        return line.split("|")
    raise _Rejected(f"triple {index} is not 's | r | o' or '(s, r, o)': {short(line, 40)}")


def _strip_fence(body: str) -> str:
    if not body.startswith("```"):
        return body
    newline = body.find("\n")
    body = body[newline + 1 :] if newline >= 0 else ""
    if body.rstrip().endswith("```"):
        body = body.rstrip()[:-3]
    return body.strip()


# --- building actions -----------------------------------------------------------------------


def _from_mapping(value: dict[Any, Any], observation: str | None) -> ParsedAction:
    name = value["action"]
    if not isinstance(name, str):
        raise _Rejected(f"action name is not a string: {short(name, 40)}")
    kind = name.strip().lower()
    if kind == "search":
        if "query" not in value:
            raise _Rejected("search with no query")
        query = value["query"]
        if not isinstance(query, str):
            raise _Rejected(f"search query is not a string: {short(query, 40)}")
        return _search(query, observation)
    if kind == "answer":
        if "answer" not in value:
            raise _Rejected("answer with no 'answer' field")
        return AnswerAction(answer=_answer_text(value["answer"]))
    if kind == "assert":
        triples = value["triples"] if "triples" in value else value.get("facts")
        if triples is None:
            raise _Rejected("assert with no triple")
        return _assert(triples)
    raise _Rejected(f"unknown action {short(name, 40)}")


def _search(query: str, observation: str | None) -> SearchAction:
    query = query.strip()
    if not query:
        raise _Rejected("search with an empty query")
    return SearchAction(query=query, observation=observation)


def _answer_text(answer: Any) -> str:
    if isinstance(answer, str):
        return answer.strip()
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        return str(answer)
    raise _Rejected(f"answer is not a string: {short(answer, 40)}")


def _assert(triples: Any) -> AssertAction:
    if isinstance(triples, tuple):
        triples = list(triples)
    if not isinstance(triples, list):
        raise _Rejected(f"assert facts are not a list: {short(triples, 40)}")
    problem = _assert_content_problem({"triples": triples})
    if problem is not None:
        raise _Rejected(problem)
    return AssertAction(triples=[_triple(triple, index) for index, triple in enumerate(triples)])


def _triple(triple: Any, index: int) -> Triple:
    if isinstance(triple, (list, tuple)):
        if len(triple) != 3:
            raise _Rejected(f"triple {index} has {len(triple)} parts, expected 3")
        given = dict(zip(TRIPLE_PARTS, triple))
    elif isinstance(triple, dict):
        given = triple
    else:
        raise _Rejected(f"triple {index} is not a list or object: {short(triple, 40)}")
    parts = {}
    for name in TRIPLE_PARTS:
        if name not in given:
            raise _Rejected(f"triple {index} has no {name}")
        part = given[name]
        if isinstance(part, str):
            part = part.strip()
        elif isinstance(part, (int, float)) and not isinstance(part, bool):
            part = str(part)
        else:
            raise _Rejected(f"triple {index} part {name} is not a string")
        if not part:
            raise _Rejected(f"triple {index} has an empty {name}")
        parts[name] = part
    return Triple(**parts)


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
