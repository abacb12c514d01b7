"""Relation lookup (docs/method.md §2.4): a relation phrase -> a lexicon id (exact, then fuzzy)."""

from __future__ import annotations

from collections.abc import Iterable

from rapidfuzz import fuzz, process

from factutil.filters.lexicon import RELATION_BY_ID, RELATION_LOOKUP_CUTOFF, RELATIONS
from factutil.filters.text import ARTICLES, BE, HAVE, LEADING_FILLERS, TRAILING_FILLERS, fold


def relation_tokens(words: Iterable[str]) -> list[str]:
    """Folded relation words as the index keys them: *be* / *have* forms unified, no articles."""
    return ["be" if word in BE else "have" if word in HAVE else word
            for word in words if word not in ARTICLES]


def _build_index() -> tuple[dict[str, tuple[tuple[str, bool], ...]], dict[str, tuple[str, ...]]]:
    index: dict[str, dict[tuple[str, bool], None]] = {}  # dicts as ordered sets
    texts: dict[str, dict[str, None]] = {}
    for rel in RELATIONS:
        for inverse, verbs in ((False, rel.forward), (True, rel.inverse)):
            for verb in verbs:
                key = " ".join(relation_tokens(fold(verb).split()))
                index.setdefault(key, {})[(rel.id, inverse)] = None
                texts.setdefault(rel.id, {})[key] = None
    return (
        {key: tuple(entries) for key, entries in index.items()},
        {rid: tuple(keys) for rid, keys in texts.items()},
    )


# _INDEX: index key -> (relation id, inverse) entries; VERBALISATIONS: relation id -> its index
# keys (the folded phrasings the relation veto compares relation texts with).
_INDEX, VERBALISATIONS = _build_index()
_INDEX_KEYS = tuple(sorted(_INDEX))


def lookup_exact(tokens: list[str]) -> tuple[tuple[str, bool], ...] | None:
    """The lexicon entries (relation id, inverse) of ``tokens``, dropping leading and trailing
    fillers until one matches; None when none does."""
    while tokens:
        entries = _INDEX.get(" ".join(tokens))
        if entries:
            return entries
        if len(tokens) > 1 and tokens[0] in LEADING_FILLERS:
            tokens = tokens[1:]
        elif len(tokens) > 1 and tokens[-1] in TRAILING_FILLERS:  # "whose mother is"
            tokens = tokens[:-1]
        else:
            return None
    return None


def lookup_fuzzy(text: str) -> tuple[tuple[str, bool], ...] | None:
    """The entries of the index key closest to a text of >= 5 characters when its ratio reaches
    ``RELATION_LOOKUP_CUTOFF``; else None."""
    if len(text) < 5:
        return None
    best = process.extractOne(text, _INDEX_KEYS, scorer=fuzz.ratio,
                              score_cutoff=RELATION_LOOKUP_CUTOFF)
    return _INDEX[best[0]] if best else None


def choose_relation(entries: tuple[tuple[str, bool], ...], dated_object: bool) -> tuple[str, bool]:
    """The first entry whose relation takes a date exactly when the object holds one ("born in
    1990" -> date of birth, "born in Paris" -> place of birth); else the first entry."""
    return next((entry for entry in entries if RELATION_BY_ID[entry[0]].dated == dated_object),
                entries[0])
