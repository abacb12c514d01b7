""":class:`FilterCache`: the filters' memo, an object its owner holds (docs/method.md §2.4)."""

from __future__ import annotations

import weakref
from functools import lru_cache, partial
from typing import Any

from factutil.filters import entities, parts, quantities, relations, text

# Bounds (entries) for a large batch: the readings of its subjects, (relation, object) pairs,
# texts and words; the verdicts on its pairs of entity keys and of relation texts.
TEXT_ENTRIES = 131072
PAIR_ENTRIES = 65536
_PAIR_HELPERS = frozenset({"same_entity", "similar_text"})


class FilterCache:
    """Memoised copies of the filters' helpers, pure functions of strings (``cache.fold(text)``,
    ``cache.same_entity(a, b)``, ...), for the ``cache=`` of :func:`~factutil.filters.analyze` and
    the vetoes; results never depend on the memo. One LRU per kind of thing: the readings of texts
    (keyed by helper name and arguments, ``TEXT_ENTRIES``) and the verdicts on pairs
    (``PAIR_ENTRIES``). Nothing is memoised at module level but tables built from constants.
    ``memo=False`` builds the form that keeps nothing (:data:`NO_MEMO`)."""

    def __init__(self, memo: bool = True) -> None:
        self.memo = memo
        self.last_align: tuple[Any, ...] = ()  # (features a, features b, alignment), last pair
        # Helpers that read other helpers get this cache, so every level is memoised here; by a
        # weak reference, so a dropped cache is freed at once rather than by the cycle collector.
        me = weakref.proxy(self)
        helpers = {
            "fold": text.fold, "words": partial(text.folded_words, cache=me),
            "scan": quantities.scan_values, "lookup_fuzzy": relations.lookup_fuzzy,
            "subject_part": partial(parts.subject_part, cache=me),
            "relation_part": partial(parts.relation_part, cache=me),
            "flip_candidates": text.flip_candidates, "part_values": quantities.part_values,
            "same_entity": partial(entities.same_entity, cache=me),
            "similar_text": text.similar_text,
        }

        def read(name: str, *args: Any) -> Any:
            return helpers[name](*args)

        # functools' LRU is in C: cachetools' pure-Python one makes the filters' work twice as slow
        self._texts, self._pairs = lru_cache(TEXT_ENTRIES)(read), lru_cache(PAIR_ENTRIES)(read)
        for name, function in helpers.items():
            store = self._pairs if name in _PAIR_HELPERS else self._texts
            setattr(self, name, partial(store, name) if memo else function)

    def sizes(self) -> dict[str, int]:
        """Entries held per kind, ``texts`` and ``pairs`` (both 0 for the memo-less form)."""
        return {"texts": self._texts.cache_info().currsize,
                "pairs": self._pairs.cache_info().currsize}

    def __repr__(self) -> str:
        return f"FilterCache(memo={self.memo}, entries={sum(self.sizes().values())})"


NO_MEMO = FilterCache(memo=False)
"""The memo-less :class:`FilterCache`: what the filters use when given none. It keeps nothing."""
