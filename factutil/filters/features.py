"""One triple -> its :class:`FactFeatures` (docs/method.md §2.4), read once and compared by every filter."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from factutil.filters.entities import _entity_key, _generational, _mark_qualifier, _plain
from factutil.filters.lexicon import RELATION_BY_ID
from factutil.filters.quantities import _has_date, _scan
from factutil.filters.relations import _choose, _lookup_exact, _lookup_fuzzy, _relation_tokens
from factutil.filters.text import (
    _CONTRACTIONS,
    _LEADING_FILLERS,
    _NEGATED_WORDS,
    _NEGATION_WORDS,
    _PREPOSITIONS,
    _SILENT,
    _WHOLE_OBJECT_NEGATIONS,
    _words,
)


@dataclass(frozen=True, slots=True)
class FactFeatures:
    """What the filters need to know about one triple, computed once by :func:`analyze`.

    ``subject_key`` / ``object_key`` are in CANONICAL direction: swapped when the relation was an
    inverse verbalisation (``inverse``) and sorted for a symmetric relation. They are folded
    (see :func:`fold`) with negation cues, numbers, dates, quantities and regnal numerals removed
    (those live in ``negated`` and ``quantities``; a generational numeral stays as a word at the
    end, and a qualifier after a comma is kept as ", " in the key). ``quantities`` holds tuples
    ``(part, kind, ...)`` with part "s" (subject) or "o" (object and relation) and kind one of
    num (value), count (value; a number before a noun), qty (dimension, value in base units,
    value as written, unit label), date (year, month, day; 0 = not given), date~ (year, the two
    day/month fields as written), md (month, day; no year), decade (first year). ``key`` is
    ``(relation_id or relation_key, subject_key, object_key, negated, quantities without the
    as-written magnitudes)`` with the keys' commas dropped; equal keys mean the same fact. ``relation_key`` is the relation id
    or, for an unknown relation, its folded text; ``negation_cues`` the cues counted;
    ``words`` the lower-case words of relation and object (for the pairwise un-/non- check).
    """

    subject: str
    relation: str
    object: str
    subject_key: str
    object_key: str
    relation_id: str | None
    inverse: bool
    negated: bool
    quantities: tuple[tuple, ...]
    key: tuple
    relation_key: str
    symmetric: bool
    negation_cues: tuple[str, ...]
    words: frozenset[str]


def _polarity(pairs: list[tuple[str, bool]], whole_object: bool) -> tuple[list[str], list[str]]:
    """Split folded (word, lower) pairs into kept words and negation cues."""
    kept: list[str] = []
    cues: list[str] = []
    single = whole_object and len(pairs) == 1
    for word, lower in pairs:
        usable = lower or not whole_object or single
        if single and word in _WHOLE_OBJECT_NEGATIONS:
            cues.append(word)
            if _WHOLE_OBJECT_NEGATIONS[word]:
                kept.append(_WHOLE_OBJECT_NEGATIONS[word])
        elif usable and word in _NEGATION_WORDS:
            cues.append(word)
        elif word in _SILENT and usable:
            continue
        elif usable and word in _CONTRACTIONS:
            cues.append(word)
            kept.append(_CONTRACTIONS[word])
        elif usable and word in _NEGATED_WORDS:
            cues.append(word)
            kept.append(_NEGATED_WORDS[word])
        else:
            kept.append(word)
    return kept, cues


@lru_cache(maxsize=16384)
def _subject_part(subject: str) -> tuple[tuple[tuple, ...], str]:
    """(values, entity key) of a subject; cached, since one subject recurs in many triples."""
    s_values, s_rest = _scan(subject)
    words = [word for word, _ in _words(_mark_qualifier(s_rest))]
    return s_values, _entity_key(words, bool(s_values), _generational(subject))


@lru_cache(maxsize=16384)
def _relation_part(relation: str, object: str) -> tuple:
    """What :func:`analyze` reads from a relation and its object (they interact: object words may
    complete the relation, a date in the object picks a dated relation), cached per pair.

    Returns (object values, object key, relation id, inverse, relation key, cues, words), with
    the object key and values in the direction written (:func:`analyze` swaps them).
    """
    r_values, r_rest = _scan(relation)
    o_values, o_rest = _scan(object)
    o_values = o_values + r_values

    r_kept, r_cues = _polarity(_words(r_rest), whole_object=False)
    o_kept, o_cues = _polarity(_words(_mark_qualifier(o_rest)), whole_object=True)
    cues = tuple(r_cues + o_cues)

    rel_tokens = _relation_tokens(r_kept) or ["be"]
    dated = _has_date(o_values)
    entries = _lookup_exact(rel_tokens)
    moved = 0
    bare = entries is None or entries[0][0] in ("be", "have")
    if bare or (o_kept and o_kept[0] in _PREPOSITIONS):
        # "X | was | born in Paris", "X | directed | by Y": object words complete the relation;
        # at least one word stays unless the object also holds a value ("born | in 1990")
        for take in range(min(4, len(o_kept) if o_values else len(o_kept) - 1), 0, -1):
            extended = _lookup_exact(rel_tokens + _relation_tokens(o_kept[:take]))
            if extended and extended[0][0] not in ("be", "have"):
                entries, moved = extended, take
                break
    relation_tokens = rel_tokens + o_kept[:moved]
    while len(relation_tokens) > 1 and relation_tokens[0] in _LEADING_FILLERS:
        relation_tokens = relation_tokens[1:]
    relation_key = " ".join(relation_tokens)
    o_kept = o_kept[moved:]
    if entries is None:
        entries = _lookup_fuzzy(relation_key)
    relation_id, inverse = _choose(entries, dated) if entries else (None, False)
    if relation_id is not None:
        relation_key = relation_id

    object_key = _entity_key(o_kept, bool(o_values), _generational(object))
    words = frozenset(word for word, lower in _words(r_rest + " " + o_rest) if lower)
    return o_values, object_key, relation_id, inverse, relation_key, cues, words


def analyze(subject: str, relation: str, object: str) -> FactFeatures:
    """Read one triple into the features the filters compare (docs/method.md §2.4).

    Args:
        subject, relation, object: the triple's parts as asserted (any case, any script).

    Returns:
        A :class:`FactFeatures`; pure and deterministic, so callers may cache it per triple.

    Raises:
        TypeError: a part is not a string.
    """
    for name, part in (("subject", subject), ("relation", relation), ("object", object)):
        if not isinstance(part, str):
            raise TypeError(f"analyze: {name} must be str, got {type(part).__name__}")
    s_values, subject_key = _subject_part(subject)
    o_values, object_key, relation_id, inverse, relation_key, cues, words = _relation_part(
        relation, object)
    negated = len(cues) % 2 == 1
    s_part = tuple(sorted(s_values))
    o_part = tuple(sorted(o_values))
    if inverse:
        subject_key, object_key, s_part, o_part = object_key, subject_key, o_part, s_part
    symmetric = relation_id is not None and RELATION_BY_ID[relation_id].symmetric
    if symmetric and (_plain(object_key), o_part) < (_plain(subject_key), s_part):
        subject_key, object_key, s_part, o_part = object_key, subject_key, o_part, s_part
    quantities = tuple(sorted([("s", *v) for v in s_part] + [("o", *v) for v in o_part]))
    key_quantities = tuple(q[:4] if q[1] == "qty" else q for q in quantities)
    key = (relation_key, _plain(subject_key), _plain(object_key), negated, key_quantities)
    return FactFeatures(
        subject=subject, relation=relation, object=object,
        subject_key=subject_key, object_key=object_key,
        relation_id=relation_id, inverse=inverse, negated=negated,
        quantities=quantities, key=key, relation_key=relation_key, symmetric=symmetric,
        negation_cues=cues, words=words,
    )
