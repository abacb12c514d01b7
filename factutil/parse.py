"""Model text -> actions (docs/method.md §1, §8): :mod:`factutil.scan` finds the candidates,
this module turns them into an action; a format error is an invalid action (docs/parsing.md)."""

from __future__ import annotations

import re
from typing import Any

from factutil.actions import (
    TRIPLE_PARTS,
    AnswerAction,
    AssertAction,
    InvalidAction,
    SearchAction,
    Triple,
    assert_content_problem,
)
from factutil.errors import short
from factutil.scan import MAX_DEPTH, Item, Number, Rejected, json_items, load, select, tag_items

__all__ = ["MAX_DEPTH", "ParsedAction", "parse_action"]

ParsedAction = SearchAction | AssertAction | AnswerAction | InvalidAction

_BOXED = re.compile(r"\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}")
_BULLET = re.compile(r"^(?:[-*\u2022]|\d{1,3}[.)])\s+")


def parse_action(text: str, observation: str | None = None) -> ParsedAction:
    """Parse one model response into an action (docs/method.md §1, §8; docs/parsing.md).

    Args:
        text: the model's response as generated (prose, code fences and all); never the prompt.
        observation: the retriever's output for this turn, kept on a ``search`` or an
            ``InvalidAction``, dropped for ``assert`` and ``answer``.

    Returns:
        A Search-, Assert- or AnswerAction; else ``InvalidAction(raw=text, reason=...)``.

    Raises:
        TypeError: ``text`` or ``observation`` is not a ``str`` (or None); nothing else escapes.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if observation is not None and not isinstance(observation, str):
        raise TypeError(f"observation must be a str or None, got {type(observation).__name__}")
    try:
        return _parse(text, observation)
    except Rejected as rejected:
        return InvalidAction(raw=text, reason=rejected.reason, observation=observation)
    except (RecursionError, MemoryError, ValueError) as error:  # pragma: no cover - last resort
        reason = f"unparseable text ({type(error).__name__})"
        return InvalidAction(raw=text, reason=reason, observation=observation)


def _parse(text: str, observation: str | None) -> ParsedAction:
    objects = json_items(text)
    tags, unclosed = tag_items(text, objects)
    selected = select(objects + tags)
    complete = [item for item in selected if item.kind != "truncated"]
    if not complete:
        failures = [(item.start, item.reason) for item in selected] + unclosed
        reason = min(failures)[1] if failures else "no action found"
        raise Rejected(reason)
    try:
        last: ParsedAction | Rejected = _evaluate(text, complete[-1], observation)
    except Rejected as rejected:
        last = rejected
    if isinstance(last, AnswerAction):
        return last
    for item in reversed(complete[:-1]):
        if item.kind == "tag" and item.name != "answer":
            continue
        try:
            action = _evaluate(text, item, observation)
        except Rejected:
            continue
        if isinstance(action, AnswerAction):
            return action
    if isinstance(last, Rejected):
        raise last
    return last


def _evaluate(text: str, item: Item, observation: str | None) -> ParsedAction:
    """The action an item stands for; raises Rejected when it is invalid."""
    if item.reason:
        raise Rejected(item.reason)
    if item.kind == "tag":
        content = text[item.inner[0] : item.inner[1]]
        if item.name == "search":
            return _search(content, observation)
        if item.name == "answer":  # ReSearch's "<answer>The final answer is \\boxed{X}</answer>": X
            boxed = _BOXED.findall(content)
            return AnswerAction(answer=(boxed[-1] if boxed else content).strip())
        if item.name == "tool_call":
            return _tool_call(load(content.strip()), observation)
        return _assert(_tag_triples(content))
    if item.depth > MAX_DEPTH:
        raise Rejected(f"JSON nested deeper than {MAX_DEPTH} levels")
    value = load(text[item.start : item.end], checked=True)
    if not isinstance(value, dict) or "action" not in value:
        raise Rejected("malformed JSON: no top-level 'action' key")
    return _from_mapping(value, observation)


def _tag_triples(content: str) -> Any:
    """The triples written inside ``<assert>``: JSON/Python literal, or one per line."""
    body = _strip_fence(content.strip())
    if not body:
        raise Rejected("assert with no triple")
    if body[0] in "[{":
        try:
            return _triples_of(load(body))
        except Rejected as whole:
            try:
                return _line_triples(body)
            except Rejected:
                raise whole from None
    return _line_triples(body)


def _triples_of(value: Any) -> Any:
    if isinstance(value, dict):  # its triples ("facts" the alias), else one triple object
        return value.get("triples", value.get("facts", [value]))
    if isinstance(value, (list, tuple)) and value and not any(
        isinstance(part, (list, tuple, dict)) for part in value
    ):
        return [value]  # one flat triple
    return value


def _line_triples(body: str) -> list[Any]:
    """One triple per non-blank line of ``body`` (stripped, not empty: one at least)."""
    triples = []
    for line in body.splitlines():
        line = _BULLET.sub("", line.strip(), count=1)
        if line:
            triples.append(_line_triple(line, len(triples)))
    return triples


def _line_triple(line: str, index: int) -> Any:
    if line[:1] in "[{":
        value = load(line)
        if isinstance(value, (list, tuple, dict)):
            return value
        raise Rejected(f"triple {index} is not a list or object: {short(line, 40)}")
    if line.startswith("(") and line.endswith(")"):
        try:
            value = load(line)
        except Rejected:
            value = None
        if isinstance(value, tuple):
            return value
        return line[1:-1].split(",")
    if "|" in line:
        return line.split("|")
    raise Rejected(f"triple {index} is not 's | r | o' or '(s, r, o)': {short(line, 40)}")


def _strip_fence(body: str) -> str:
    if not body.startswith("```"):
        return body
    return body.partition("\n")[2].rstrip().removesuffix("```").strip()  # the fence lines dropped


def _from_mapping(value: dict[Any, Any], observation: str | None) -> ParsedAction:
    name = value["action"]
    if not _is_text(name):
        raise Rejected(f"action name is not a string: {short(name, 40)}")
    kind = name.strip().lower()
    if kind == "search":
        if "query" not in value:
            raise Rejected("search with no query")
        query = value["query"]
        if not _is_text(query):
            raise Rejected(f"search query is not a string: {short(query, 40)}")
        return _search(query, observation)
    if kind == "answer":
        if "answer" not in value:
            raise Rejected("answer with no 'answer' field")
        return AnswerAction(answer=_text(value["answer"],
                                         f"answer is not a string: {short(value['answer'], 40)}"))
    if kind == "assert":
        triples = value["triples"] if "triples" in value else value.get("facts")
        if triples is None:
            raise Rejected("assert with no triple")
        return _assert(triples)
    raise Rejected(f"unknown action {short(name, 40)}")


def _tool_call(value: Any, observation: str | None) -> SearchAction:
    """verl's search tool call ``{"name": "search", "arguments": {"query_list": [q, ...]}}``: one
    search, its queries joined by ``"; "``; a call verl's tool refuses (another tool, no query list) is invalid."""
    arguments = value.get("arguments") if isinstance(value, dict) and value.get("name") == "search" else None
    queries = arguments.get("query_list") if isinstance(arguments, dict) else None
    if not isinstance(queries, list) or not queries or not all(_is_text(q) for q in queries):
        raise Rejected(f"tool call that is no search with a query list: {short(value, 40)}")
    return _search("; ".join(q.strip() for q in queries), observation)


def _search(query: str, observation: str | None) -> SearchAction:
    query = query.strip()
    if not query:
        raise Rejected("search with an empty query")
    return SearchAction(query=query, observation=observation)


def _is_text(value: Any) -> bool:
    """A JSON string (or a Python one); a number is text of its own kind (:class:`Number`)."""
    return isinstance(value, str) and not isinstance(value, Number)


def _text(value: Any, problem: str) -> str:
    """An answer or a triple part: a string stripped (a JSON number too: its literal text, as the
    model wrote it) or a number's text; else Rejected(problem)."""
    if isinstance(value, str):
        return str(value).strip()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise Rejected(problem)


def _assert(triples: Any) -> AssertAction:
    if isinstance(triples, tuple):
        triples = list(triples)
    if not isinstance(triples, list):
        raise Rejected(f"assert facts are not a list: {short(triples, 40)}")
    problem = assert_content_problem({"triples": triples})
    if problem is not None:
        raise Rejected(problem)
    return AssertAction(triples=[_triple(triple, index) for index, triple in enumerate(triples)])


def _triple(triple: Any, index: int) -> Triple:
    # assert_content_problem has refused a wrong arity and blank parts already.
    if isinstance(triple, (list, tuple)):
        given = dict(zip(TRIPLE_PARTS, triple))
    elif isinstance(triple, dict):
        given = triple
    else:
        raise Rejected(f"triple {index} is not a list or object: {short(triple, 40)}")
    parts = {}
    for name in TRIPLE_PARTS:
        if name not in given:
            raise Rejected(f"triple {index} has no {name}")
        parts[name] = _text(given[name], f"triple {index} part {name} is not a string")
    return Triple(**parts)
