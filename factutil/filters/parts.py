"""A triple's parts -> values, entity keys, relation id and negation cues (docs/method.md §2.4),
in two readings a :class:`~factutil.filters.FilterCache` memoises: a subject, a relation + object.
"""

from __future__ import annotations

from typing import Any

from factutil.filters.entities import entity_key, generational_suffixes, mark_qualifier
from factutil.filters.quantities import has_date
from factutil.filters.relations import choose_relation, lookup_exact, relation_tokens
from factutil.filters.text import (
    CONTRACTIONS,
    LEADING_FILLERS,
    NEGATED_WORDS,
    NEGATION_WORDS,
    PREPOSITIONS,
    SILENT,
    WHOLE_OBJECT_NEGATIONS,
)

_STEMMED = CONTRACTIONS | NEGATED_WORDS  # a cue that leaves its verb or stem (no word is both)


def _polarity(pairs: list[tuple[str, bool]], whole_object: bool) -> tuple[list[str], list[str]]:
    """Split folded (word, lower) pairs into kept words and negation cues."""
    kept: list[str] = []
    cues: list[str] = []
    single = whole_object and len(pairs) == 1
    for word, lower in pairs:
        usable = lower or not whole_object or single
        if single and word in WHOLE_OBJECT_NEGATIONS:
            cues.append(word)
            if WHOLE_OBJECT_NEGATIONS[word]:
                kept.append(WHOLE_OBJECT_NEGATIONS[word])
        elif usable and word in NEGATION_WORDS:
            cues.append(word)
        elif word in SILENT and usable:
            continue
        elif usable and word in _STEMMED:
            cues.append(word)
            kept.append(_STEMMED[word])
        else:
            kept.append(word)
    return kept, cues


def subject_part(subject: str, cache: Any) -> tuple[tuple[tuple, ...], str]:
    """(values, entity key) of a subject."""
    s_values, s_rest = cache.scan(subject)
    words = [word for word, _ in cache.words(mark_qualifier(s_rest))]
    return s_values, entity_key(words, bool(s_values), generational_suffixes(subject, cache))


def relation_part(relation: str, object: str, cache: Any) -> tuple:
    """(object values, object key, relation id, inverse, relation key, cues, words) of a relation
    and its object, read together: object words may complete the relation, and a date in the
    object picks a dated relation. Object key and values are as written (not swapped)."""
    r_values, r_rest = cache.scan(relation)
    o_values, o_rest = cache.scan(object)
    o_values = o_values + r_values

    r_kept, r_cues = _polarity(cache.words(r_rest), whole_object=False)
    o_kept, o_cues = _polarity(cache.words(mark_qualifier(o_rest)), whole_object=True)
    cues = tuple(r_cues + o_cues)

    rel_tokens = relation_tokens(r_kept) or ["be"]
    dated = has_date(o_values)
    entries = lookup_exact(rel_tokens)
    moved = 0
    bare = entries is None or entries[0][0] in ("be", "have")
    if bare or (o_kept and o_kept[0] in PREPOSITIONS):
        # "X | was | born in Paris", "X | directed | by Y": object words complete the relation;
        # at least one word stays unless the object also holds a value ("born | in 1990")
        for take in range(min(4, len(o_kept) if o_values else len(o_kept) - 1), 0, -1):
            extended = lookup_exact(rel_tokens + relation_tokens(o_kept[:take]))
            if extended and extended[0][0] not in ("be", "have"):
                entries, moved = extended, take
                break
    key_tokens = rel_tokens + o_kept[:moved]
    while len(key_tokens) > 1 and key_tokens[0] in LEADING_FILLERS:
        key_tokens = key_tokens[1:]
    relation_key = " ".join(key_tokens)
    o_kept = o_kept[moved:]
    if entries is None:
        entries = cache.lookup_fuzzy(relation_key)
    relation_id, inverse = choose_relation(entries, dated) if entries else (None, False)
    if relation_id is not None:
        relation_key = relation_id

    object_key = entity_key(o_kept, bool(o_values), generational_suffixes(object, cache))
    words = frozenset(word for word, lower in cache.words(r_rest + " " + o_rest) if lower)
    return o_values, object_key, relation_id, inverse, relation_key, cues, words
