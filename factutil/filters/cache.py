""":class:`FilterCache`: the memo of the filters' helpers, an object its owner holds (docs/method.md §2.4).

Every filter helper is a pure function of strings (or of a word set), and a batch repeats parts
far more than triples, so the analysis and the vetoes read through memoised copies of them: one
subject's values and key, one (relation, object) pair's reading, one text's scan, words and
folding, one fuzzy relation look-up, one pair of entity keys, one word set's negating-prefix words, one
fact's quantities split by part, and the alignment of the last pair. Those copies belong to a
:class:`FilterCache`; the :class:`~factutil.cluster.SemanticClusterer` creates one and holds it
(``filter_cache``), so a new clusterer starts empty and nothing is shared between clusterers or
kept at module level.
Results never depend on the memo: :data:`NO_MEMO`, which keeps nothing, gives the same answers.

What stays module-level is built once from constants: the relation lexicon and its index, the
ancestors of each relation id, pint's unit registry and the factors of the whitelisted units.
"""

from __future__ import annotations

import weakref
from functools import lru_cache, partial
from typing import Any

from factutil.filters import entities, parts, quantities, relations, text

# Bounds per helper (entries): as many subjects, (relation, object) pairs and texts as a large
# batch holds; entity-key pairs and folded words are more numerous.
_SIZES = {
    "fold": 65536, "words": 16384, "scan": 16384, "lookup_fuzzy": 8192, "subject_part": 16384,
    "relation_part": 16384, "same_entity": 65536, "flip_candidates": 16384, "part_values": 16384,
}


class FilterCache:
    """Memoised copies of the filters' helpers, owned by whoever holds this object.

    Pass it to :func:`~factutil.filters.analyze`, the vetoes and
    :func:`~factutil.filters.first_veto` (``cache=``); the clusterer passes its own. Each helper
    is an LRU of the size in ``_SIZES``; :meth:`clear` empties them all, as in a new process.

    Args:
        memo: False builds the memo-less form (each helper called through, nothing kept), as
            :data:`NO_MEMO`, what the filters use when given no cache.

    Not thread-safe for concurrent writers beyond what ``functools.lru_cache`` guarantees (each
    helper's entries stay consistent; the last-pair alignment is a single attribute).
    """

    __slots__ = ("__weakref__", "memo", "last_align", *_SIZES)

    def __init__(self, memo: bool = True) -> None:
        self.memo = memo
        self.last_align: tuple[Any, ...] = ()  # (features a, features b, alignment) of the last pair

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
