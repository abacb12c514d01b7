"""Retrieved passages as facts (``facts="retrieved"``, docs/method.md §9): a passage's identity and
its form as a fact; :mod:`factutil.search_r1` reads the passages out of an observation."""

from __future__ import annotations

from collections.abc import Sequence

from factutil.facts import normalize_fact_text
from factutil.search_r1 import Passage

__all__ = ["Passage", "member_label", "passage_key", "passage_parts"]


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
