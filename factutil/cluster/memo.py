"""What a semantic clusterer keeps per fact and per checked pair across steps."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import count
from typing import Any, NamedTuple

from cachetools import LRUCache

from factutil.facts import fact_text
from factutil.filters import analyze

__all__ = ["FactMemo", "FactRecord"]


class FactRecord(NamedTuple):
    """What the memo keeps per distinct fact (its exact parts)."""

    text: str  # normalised text (docs/method.md §2.1)
    features: Any  # filter analysis (factutil.filters.FactFeatures), None when not needed
    key_hash: int  # hash(features.key), 0 without features
    serial: int  # unique per record for the memo's life: names the fact in the pair memo
    truncated: bool | None = None  # the embedder reads the text only in part; None: not asked yet


class FactMemo:
    """Per fact (keyed by its exact parts: the analysis reads letter case) its
    :class:`FactRecord`, per checked pair (keyed by the records' serials) the name of the filter
    that vetoed it (``""``: none); two LRUs of ``max_entries``, for one clusterer's config."""

    def __init__(self, max_entries: int):
        self.records: LRUCache = LRUCache(max(max_entries, 1))
        self.pairs: LRUCache = LRUCache(max(max_entries, 1))
        self.keep = max_entries > 0
        self._serials = count()

    def records_of(self, parts: Sequence[tuple[str, str, str]], template: str, analyse: bool,
                   filter_cache: Any, texts: Sequence[str] | None = None) -> list[FactRecord]:
        """The record of each ``(subject, relation, object)``, made when missing (``texts``:
        their normalised texts when known)."""
        store = self.records
        known = store.get
        records = []
        for index, key in enumerate(parts):
            record = known(key)
            if record is None or (analyse and record.features is None):
                features = analyze(*key, cache=filter_cache) if analyse else None
                text = texts[index] if texts is not None else fact_text(*key, template)
                record = FactRecord(text, features,
                                    hash(features.key) if analyse else 0, next(self._serials))
                if self.keep:
                    store[key] = record
            records.append(record)
        return records

    def set_truncated(self, parts: Sequence[tuple[str, str, str]], records: Sequence[FactRecord],
                      truncated: Sequence[bool]) -> None:
        """Keep each fact's ``truncated`` answer on its record (of :meth:`records_of`)."""
        if not self.keep:
            return
        store = self.records
        for key, record, flag in zip(parts, records, truncated):
            if record.truncated is None and key in store:
                store[key] = record._replace(truncated=bool(flag))
