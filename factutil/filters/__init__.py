"""Vetoes on candidate edges: same fact, or a look-alike that means something else.

:func:`analyze` reads a triple once into :class:`FactFeatures`; each filter is a pure, symmetric
function of two features returning a reason or None (docs/method.md §2.4; every rule is in
docs/filters.md). A :class:`FilterCache` memoises the helpers without changing any answer.
"""

from __future__ import annotations

from factutil.filters.cache import NO_MEMO, FilterCache
from factutil.filters.entities import GENERATIONAL, same_entity
from factutil.filters.features import FactFeatures, analyze
from factutil.filters.lexicon import (
    ENTITY_CUTOFF,
    RELATION_BY_ID,
    RELATION_LOOKUP_CUTOFF,
    RELATION_TEXT_CUTOFF,
    RELATIONS,
    Relation,
)
from factutil.filters.text import fold
from factutil.filters.vetoes import (
    DEFAULT_FILTERS,
    FILTERS,
    alike,
    entity_veto,
    first_veto,
    negation_veto,
    numeric_veto,
    relation_veto,
)

__all__ = [
    "DEFAULT_FILTERS", "ENTITY_CUTOFF", "FILTERS", "GENERATIONAL", "NO_MEMO", "RELATIONS",
    "RELATION_BY_ID", "RELATION_LOOKUP_CUTOFF", "RELATION_TEXT_CUTOFF", "FactFeatures",
    "FilterCache", "Relation", "alike", "analyze", "entity_veto", "first_veto", "fold",
    "negation_veto", "numeric_veto", "relation_veto", "same_entity",
]

