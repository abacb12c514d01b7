"""Relation lookup (docs/method.md §2.4): a relation phrase -> a lexicon id (exact, then fuzzy)."""

from __future__ import annotations

from collections.abc import Iterable

from rapidfuzz import fuzz, process

from factutil.filters.lexicon import RELATION_BY_ID, RELATION_LOOKUP_CUTOFF, RELATIONS
from factutil.filters.text import _ARTICLES, _BE, _HAVE, _LEADING_FILLERS, _TRAILING_FILLERS, fold


def _relation_tokens(words: Iterable[str]) -> list[str]:
    out = []
    for word in words:
        if word in _BE:
            out.append("be")
        elif word in _HAVE:
            out.append("have")
        elif word not in _ARTICLES:
            out.append(word)
    return out


def _build_index() -> tuple[dict[str, tuple[tuple[str, bool], ...]], dict[str, tuple[str, ...]]]:
    index: dict[str, list[tuple[str, bool]]] = {}
    texts: dict[str, list[str]] = {}
    for rel in RELATIONS:
        for inverse, verbs in ((False, rel.forward), (True, rel.inverse)):
            for verb in verbs:
                key = " ".join(_relation_tokens(fold(verb).split()))
                entry = (rel.id, inverse)
                if entry not in index.setdefault(key, []):
                    index[key].append(entry)
                texts.setdefault(rel.id, [])
                if key not in texts[rel.id]:
                    texts[rel.id].append(key)
    return (
        {key: tuple(entries) for key, entries in index.items()},
        {rid: tuple(keys) for rid, keys in texts.items()},
    )


_INDEX, _VERBALISATIONS = _build_index()
_INDEX_KEYS = tuple(sorted(_INDEX))


def _lookup_exact(tokens: list[str]) -> tuple[tuple[str, bool], ...] | None:
    tokens = list(tokens)
    while tokens:
        entries = _INDEX.get(" ".join(tokens))
        if entries:
            return entries
        if len(tokens) > 1 and tokens[0] in _LEADING_FILLERS:
            tokens = tokens[1:]
            continue
        if len(tokens) > 1 and tokens[-1] in _TRAILING_FILLERS:  # "whose mother is"
            tokens = tokens[:-1]
            continue
        return None
    return None


def _lookup_fuzzy(text: str) -> tuple[tuple[str, bool], ...] | None:
    if len(text) < 5:
        return None
    best = process.extractOne(text, _INDEX_KEYS, scorer=fuzz.ratio,
                              score_cutoff=RELATION_LOOKUP_CUTOFF)
    return _INDEX[best[0]] if best else None


def _choose(entries: tuple[tuple[str, bool], ...], dated_object: bool) -> tuple[str, bool]:
    for rid, inverse in entries:
        if RELATION_BY_ID[rid].dated == dated_object:
            return rid, inverse
    return entries[0]
