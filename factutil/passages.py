"""A search's observation as passages: the facts of ``facts="retrieved"`` (docs/method.md §9),
which also lists the layouts :func:`split_passages` reads."""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import pairwise
from typing import Any, NamedTuple

from factutil.actions import PassageItem
from factutil.facts import normalize_fact_text

__all__ = [
    "Passage", "Passages", "member_label", "passage_key", "passage_parts", "passages_of",
    "split_passages",
]

# "Doc 3(Title: "Paris (film)") text": the title ends at the first ")" followed by a space or
# the line's end, so parentheses inside a title stay in it.
_DOC = re.compile(r"^[ \t]*Doc[ \t]+\d+[ \t]*\(Title:[ \t]*(.*?)\)(?=\s|$)[ \t]*", re.MULTILINE)
_NUMBERED = re.compile(r"^[ \t]*(?:\[\d{1,3}\]|\d{1,3}[.)])[ \t]+", re.MULTILINE)
_BLANK = re.compile(r"\n[ \t]*\n")


class Passage(NamedTuple):
    """One retrieved passage: its id (``""`` when the input gives none), title and text."""

    id: str
    title: str
    text: str


class Passages(NamedTuple):
    """The passages of one observation, and whether no layout split it (one passage then)."""

    passages: list[Passage]
    unsplit: bool


def split_passages(observation: str) -> Passages:
    """The passages of a search's observation (docs/method.md §9 lists the layouts); one that no
    layout splits is the one passage (``unsplit`` True)."""
    docs = list(_DOC.finditer(observation))
    if docs:
        passages = []
        for k, match in enumerate(docs):
            end = docs[k + 1].start() if k + 1 < len(docs) else len(observation)
            title = match.group(1).strip().strip('"').strip()
            passages.append(Passage("", title, observation[match.end():end].strip()))
        return Passages([p for p in passages if p.text or p.title], False)
    pieces = _numbered(observation)
    if len(pieces) < 2:
        pieces = [piece.strip() for piece in _BLANK.split(observation) if piece.strip()]
    if len(pieces) > 1:
        return Passages([Passage("", "", piece) for piece in pieces], False)
    text = observation.strip()
    return Passages([Passage("", "", text)] if text else [], bool(text))


def _numbered(observation: str) -> list[str]:
    """The pieces of numbered passages, when the observation starts with one."""
    starts = [match.start() for match in _NUMBERED.finditer(observation)]
    if not starts or observation[: starts[0]].strip():
        return []
    bounds = [*starts, len(observation)]
    pieces = [_NUMBERED.sub("", observation[a:b], count=1).strip() for a, b in pairwise(bounds)]
    return [piece for piece in pieces if piece]


def passages_of(given: Sequence[Any]) -> list[Passage]:
    """Passages a search lists: each a :class:`~factutil.actions.PassageItem`, a mapping of its
    fields, or its text; ``contents`` (``'"Title"\ntext'``) is split into title and text.

    Raises:
        pydantic.ValidationError: an item without a text, or of another type.
    """
    passages = []
    for item in given:
        item = PassageItem.model_validate({"text": item} if isinstance(item, str) else item)
        title, text = item.title, item.text
        if text is None:
            head, _, text = item.contents.partition("\n")
            title = title or head.strip().strip('"')
        identity = "" if item.id is None else str(item.id)
        passages.append(Passage(identity, title.strip(), text.strip()))
    return passages


def passage_parts(passage: Passage) -> list[str]:
    """A passage as a fact's parts, ``[title, "id:<id>" or "", text]`` (docs/method.md §9)."""
    return [passage.title, f"id:{passage.id}" if passage.id else "", passage.text]


def passage_key(parts: Sequence[str]) -> str:
    """A passage's identity from its :func:`passage_parts`: ``id:<id>``, else its normalised
    title and text."""
    title, tag, text = parts
    if tag:
        return tag
    return normalize_fact_text(f"{title} | {text}" if title else text)


def member_label(parts: Sequence[str], retrieved: bool, width: int = 160) -> str:
    """A cluster member as one line: ``subject | relation | object``, or for a passage ``Title:
    text`` (text cut to ``width`` characters) and ``[id:...]`` when it has one."""
    if not retrieved:
        return " | ".join(parts)
    title, tag, text = parts
    body = " ".join(text.split())
    body = body[:width] + "…" if len(body) > width else body
    return (f"{title}: " if title else "") + body + (f" [{tag}]" if tag else "")
