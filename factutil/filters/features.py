"""One triple -> its :class:`FactFeatures` (docs/method.md §2.4), read once for every filter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from factutil.filters.cache import NO_MEMO
from factutil.filters.entities import plain_key
from factutil.filters.lexicon import RELATION_BY_ID


# Not frozen: a frozen dataclass sets each field through object.__setattr__, which makes
# building one ~4x dearer, and a step builds thousands of analyses. Values are never
# changed after construction (caches share them, and the vetoes memoise by identity); the hash
# is the fields' hash, as a frozen one's.
@dataclass(slots=True, unsafe_hash=True)
class FactFeatures:
    """What the filters need to know about one triple (immutable by contract).

    ``subject_key`` / ``object_key``: folded entity keys without cues and values, in canonical
    direction (swapped for an ``inverse`` verbalisation, sorted when symmetric). ``quantities``:
    ``(part, kind, ...)``, part "s" or "o" (object and relation), kind as
    :func:`~factutil.filters.quantities.scan_values` reads it. ``relation_key``: the relation
    id, else the folded text. ``words``: lower-case words of relation and object.
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


def analyze(subject: str, relation: str, object: str, cache: Any = None) -> FactFeatures:
    """Read one triple, as asserted, into its :class:`FactFeatures` (docs/method.md §2.4);
    TypeError for a part that is not a string. ``cache``: a :class:`~factutil.filters.FilterCache`
    to memoise through, or None (the same result)."""
    for name, part in (("subject", subject), ("relation", relation), ("object", object)):
        if not isinstance(part, str):
            raise TypeError(f"analyze: {name} must be str, got {type(part).__name__}")
    cache = cache if cache is not None else NO_MEMO
    s_values, subject_key = cache.subject_part(subject)
    o_values, object_key, relation_id, inverse, relation_key, cues, words = cache.relation_part(
        relation, object)
    negated = len(cues) % 2 == 1  # a double negation cancels
    s_part = tuple(sorted(s_values))
    o_part = tuple(sorted(o_values))
    if inverse:
        subject_key, object_key, s_part, o_part = object_key, subject_key, o_part, s_part
    symmetric = relation_id is not None and RELATION_BY_ID[relation_id].symmetric
    if symmetric and (plain_key(object_key), o_part) < (plain_key(subject_key), s_part):
        subject_key, object_key, s_part, o_part = object_key, subject_key, o_part, s_part
    quantities = tuple(sorted([("s", *v) for v in s_part] + [("o", *v) for v in o_part]))
    # equal keys mean the same fact: qualifier commas and as-written magnitudes left out
    key = (relation_key, plain_key(subject_key), plain_key(object_key), negated,
           tuple(q[:4] if q[1] == "qty" else q for q in quantities))
    return FactFeatures(
        subject=subject, relation=relation, object=object,
        subject_key=subject_key, object_key=object_key,
        relation_id=relation_id, inverse=inverse, negated=negated,
        quantities=quantities, key=key, relation_key=relation_key, symmetric=symmetric,
        negation_cues=cues, words=words,
    )
