""":class:`FilterCache`: the filters' memo, an object its owner holds (docs/method.md §2.4).

The helpers are pure functions of strings and a batch repeats parts far more than triples, so
the analysis and the vetoes read through memoised copies owned by a cache (nothing memoised at
module level but tables built from constants). Results never depend on the memo.
"""

from __future__ import annotations

import weakref
from functools import lru_cache, partial
from typing import Any

from factutil.filters import entities, parts, quantities, relations, text

# Bounds per helper (entries): as many subjects, (relation, object) pairs and texts as a large
# batch holds; entity-key pairs and folded words are more numerous (relation-text pairs fewer).
_SIZES = {
    "fold": 65536, "words": 16384, "scan": 16384, "lookup_fuzzy": 8192, "subject_part": 16384,
    "relation_part": 16384, "same_entity": 65536, "flip_candidates": 16384, "part_values": 16384,
    "similar_text": 16384,
}


class FilterCache:
    """Memoised copies of the filters' helpers (an LRU each, sized by ``_SIZES``), for the
    ``cache=`` of :func:`~factutil.filters.analyze` and the vetoes; ``memo=False`` builds the
    form that keeps nothing (:data:`NO_MEMO`)."""

    __slots__ = ("__weakref__", "memo", "last_align", *_SIZES)

    def __init__(self, memo: bool = True) -> None:
        self.memo = memo
        self.last_align: tuple[Any, ...] = ()  # (features a, features b, alignment), last pair

        def wrap(name: str, function: Any) -> Any:
            return lru_cache(maxsize=_SIZES[name])(function) if memo else function

        # Helpers that read other helpers get this cache, so every level is memoised here; by a
        # weak reference, so a dropped cache is freed at once rather than by the cycle collector.
        me = weakref.proxy(self)
        self.fold = wrap("fold", text.fold)
        self.words = wrap("words", partial(text.folded_words, cache=me))
        self.scan = wrap("scan", quantities.scan_values)
        self.lookup_fuzzy = wrap("lookup_fuzzy", relations.lookup_fuzzy)
        self.subject_part = wrap("subject_part", partial(parts.subject_part, cache=me))
        self.relation_part = wrap("relation_part", partial(parts.relation_part, cache=me))
        self.same_entity = wrap("same_entity", partial(entities.same_entity, cache=me))
        self.flip_candidates = wrap("flip_candidates", text.flip_candidates)
        self.part_values = wrap("part_values", quantities.part_values)
        self.similar_text = wrap("similar_text", text.similar_text)

    def clear(self) -> None:
        """Empty every memo (the module-level constant tables stay built)."""
        if self.memo:
            for name in _SIZES:
                getattr(self, name).cache_clear()
        self.last_align = ()

    def sizes(self) -> dict[str, int]:
        """Entries held per helper (all 0 for the memo-less form)."""
        if not self.memo:
            return dict.fromkeys(_SIZES, 0)
        return {name: getattr(self, name).cache_info().currsize for name in _SIZES}

    def __repr__(self) -> str:
        return f"FilterCache(memo={self.memo}, entries={sum(self.sizes().values())})"


NO_MEMO = FilterCache(memo=False)
"""The memo-less :class:`FilterCache`: what the filters use when given none. It keeps nothing."""
