"""Vetoes on candidate edges: same fact, or a look-alike that means something else (docs/method.md §2.4).

:func:`analyze` reads one triple once into a :class:`FactFeatures`; each filter is a pure,
symmetric function of two features (``veto(a, b) == veto(b, a)``, reason included) that returns a
short reason when it vetoes and None otherwise. :func:`first_veto` runs the enabled filters in the
fixed order negation, numeric, relation, entity; :func:`alike` says when no filter can veto a pair.
Helpers are memoised in a :class:`FilterCache` that its owner passes (``cache=``); without one the
answers are the same. Every rule is listed in docs/filters.md.

Modules, in the order a triple is read: ``lexicon`` (relation table, cutoffs), ``text`` (folding,
words, negation cues), ``quantities`` (numbers, dates, units), ``relations`` (phrase -> relation
id), ``entities`` (entity keys and matching), ``parts`` (values, keys, relation id of a part),
``cache``, ``features`` (:func:`analyze`) and ``vetoes`` (the four filters).
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
    "DEFAULT_FILTERS",
    "ENTITY_CUTOFF",
    "FILTERS",
    "GENERATIONAL",
    "NO_MEMO",
    "RELATIONS",
    "RELATION_BY_ID",
    "RELATION_LOOKUP_CUTOFF",
    "RELATION_TEXT_CUTOFF",
    "FactFeatures",
    "FilterCache",
    "Relation",
    "alike",
    "analyze",
    "entity_veto",
    "first_veto",
    "fold",
    "negation_veto",
    "numeric_veto",
    "relation_veto",
    "same_entity",
]

