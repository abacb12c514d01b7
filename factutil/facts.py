"""A triple as a fact of the method (docs/method.md §2.1): its normalised text, and each
group's distinct facts with one representative each."""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, NamedTuple

DEFAULT_TEMPLATE = "{subject} | {relation} | {object}"
fact_parts = attrgetter("subject", "relation", "object")  # of a Fact or a triple model


def normalize_fact_text(text: str) -> str:
    """NFKC, case-fold, collapse whitespace, strip (docs/method.md §2.1; queries too, §5)."""
    # str.split() splits on exactly the characters re's \s matches (str.isspace), and is faster.
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


class Fact(NamedTuple):
    """A validated triple as a plain tuple (what a :class:`~factutil.cluster.Clusterer` gets)."""

    subject: str
    relation: str
    object: str


def fact_text(subject: str, relation: str, object: str, template: str = DEFAULT_TEMPLATE) -> str:
    """The normalised text of a triple under ``template`` (docs/method.md §2.1)."""
    return normalize_fact_text(template.format(subject=subject, relation=relation, object=object))


def triple_text(triple: Any, template: str = DEFAULT_TEMPLATE) -> str:
    """The normalised text of a :class:`Fact` (or anything with its three attributes) under
    ``template`` (docs/method.md §2.1)."""
    return fact_text(triple.subject, triple.relation, triple.object, template)


def distinct_facts(
    parts: Sequence[Sequence[str]], template: str = DEFAULT_TEMPLATE, first: int = 0,
    key: Callable[[Sequence[str]], str] | None = None,
) -> tuple[list[str], list[int], list[int]]:
    """The distinct normalised texts of some triples, sorted, each with one representative, the
    smallest triple sharing it, so the choice does not depend on input order (docs/method.md §2.1).

    Args:
        parts: ``(subject, relation, object)`` of each triple, all tuples or all lists.
        first: the number of the first distinct text (a batch numbers its groups' facts on).
        key: a fact's text when not its template text (:func:`factutil.passages.passage_key`).

    Returns:
        ``(texts, chosen, position)``: the k distinct texts, sorted; the index in ``parts`` of
        each one's representative; per part, ``first`` + the position of its text.
    """
    if key is None:  # each distinct triple's text once: a batch repeats its triples
        text_of: dict[tuple[str, ...], str] = {}
        texts = [text_of.get(whole) or text_of.setdefault(whole, fact_text(*whole, template))
                 for whole in map(tuple, parts)]
    else:
        texts = [key(part) for part in parts]
    local: dict[str, int] = {}
    best: list[int] = []
    found: list[int] = []
    for i, text in enumerate(texts):
        k = local.get(text)
        if k is None:
            k = local[text] = len(best)
            best.append(i)
        elif parts[i] < parts[best[k]]:
            best[k] = i
        found.append(k)
    distinct = list(local)
    order = sorted(range(len(distinct)), key=distinct.__getitem__)
    rank = sorted(range(len(distinct)), key=order.__getitem__)  # the inverse permutation
    return [distinct[k] for k in order], [best[k] for k in order], [first + rank[k] for k in found]


def representatives(
    triples: Sequence[Any], template: str = DEFAULT_TEMPLATE
) -> tuple[list[str], list[Any]]:
    """(texts, triples): the k distinct texts of ``triples``, sorted, each with its
    representative (:func:`distinct_facts`)."""
    texts, chosen, _ = distinct_facts([fact_parts(triple) for triple in triples], template)
    return texts, [triples[i] for i in chosen]
