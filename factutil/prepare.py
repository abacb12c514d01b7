"""Per-fact work off the critical path: one rollout's facts -> :class:`PreparedFacts` (docs/method.md §2.1–§2.4).

Everything the clustering step does per fact, rather than per pair or per group, depends on that
fact alone: its normalised text (§2.1), its embedding (§2.2; a vector never depends on the texts
embedded with it) and its filter analysis (§2.4; read from its own parts). :func:`prepare_facts`
does that work for one rollout, trajectory or list of triples, wherever it runs (a trainer's
rollout worker, a reward worker, another process), and returns it as a small picklable value.
:func:`factutil.compute_process_advantages` (``prepared=``) and
:meth:`factutil.cluster.SemanticClusterer.add_prepared` take it: the batch step uses what it is
given and computes what is missing itself, with the same results bit for bit (the vectors come
from the same embedder through the same :func:`~factutil.embed.embed_unique` path, the analyses
from the same :func:`~factutil.filters.analyze`).

A :class:`PreparedFacts` is valid for the configs with its ``template`` and, for semantic
clustering, its ``embedder`` name, ``filters`` and ``key_edges`` (and, with
``prepared_device="same"``, its ``device``: :meth:`PreparedFacts.mismatch`); the clusterer
ignores any other, counts it and warns once. A step that receives many items (one per rollout)
reads them with :func:`load_prepared`.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import numpy as np
from pydantic import BaseModel, TypeAdapter, ValidationError

from factutil import prepared_bytes as shipped
from factutil.actions import Action, AssertAction, Triple
from factutil.cluster import ExactClusterer
from factutil.config import FactUtilConfig
from factutil.embed import Embedder, config_embedder, device_type, embed_unique
from factutil.errors import error_messages, short
from factutil.facts import Fact, fact_text
from factutil.filters import FactFeatures, FilterCache, analyze
from factutil.load import _fast_row, rollout_row
from factutil.result import gc_paused
from factutil.schema import Rollout, coerce_action

__all__ = ["PreparedFacts", "load_prepared", "merge_prepared", "prepare_facts"]

_FEATURE_FIELDS = tuple(f.name for f in fields(FactFeatures))
_ANALYSIS_FIELDS = _FEATURE_FIELDS[3:]  # the parts (subject, relation, object) are kept once
_ANALYSIS_WIDTH = len(_ANALYSIS_FIELDS)
_VALIDATE_ACTIONS = TypeAdapter(list[Action]).validate_python


@dataclass(frozen=True, eq=False)
class PreparedFacts:
    """The per-fact work of some facts (docs/method.md §2.1–§2.4), as the batch step takes it.

    Facts are distinct by their exact parts (letter case counts: the filter analysis reads it)
    and sorted by them, except the shipped rows' work as a step reads it
    (:func:`factutil.rollout_work.read_rollout_work`: in order of first appearance, each
    occurrence given its row); n is their number.

    Attributes:
        embedder: ``Embedder.name`` of the model that made ``vectors``; None without vectors.
        template: the triple template the texts were made with (``config.triple_template``).
        filters: ``config.filters`` of the config it was made for (tuple of names).
        key_edges: ``config.key_edges`` of that config.
        parts: n ``(subject, relation, object)`` tuples of str.
        texts: n normalised texts (:func:`~factutil.facts.fact_text`).
        vectors: float32 (n, d), read-only, L2-normalised, row i for ``texts[i]``; None in exact
            mode. Reading the shipped form refuses a row that is not a finite unit vector
            (within 1e-3): a changed byte must not reach the similarities.
        analyses: n :class:`~factutil.filters.FactFeatures` (plain values, no cache); None when
            neither a filter nor key edges need them (exact mode, ``filters=[]`` without
            ``key_edges``).
        device: the kind of device the vectors were made on (:func:`~factutil.embed.device_type`:
            ``"cpu"``, ``"cuda"``, ``"mps"`` …); ``"cpu"`` without vectors. One model's vectors
            from two kinds differ by float rounding (config ``prepared_device``).
        sources: how many items this one merges (:func:`merge_prepared`; 1 for
            :func:`prepare_facts`' output); a clusterer that ignores it counts this many. Not
            part of equality.

    Size: :meth:`to_bytes` writes the binary form of :mod:`factutil.prepared_bytes` (pickling
    writes the same bytes): a fact costs its vector (4·d bytes: 1,536 for MiniLM's 384
    dimensions) plus its parts, text and analysis (JSON): 1,882 bytes per fact in all, 346
    without the vector, measured over the 1,536 rollouts of benchmark workload M, one
    PreparedFacts per rollout (6,054 facts; the pickled form of earlier versions took 1,770).
    Loading many items is mostly per-item and per-fact Python work; read them with
    :func:`load_prepared`, which reads the items' strings, vectors and lengths together,
    deduplicates the facts once and decodes and checks only the kept facts' analyses
    (``python benchmarks/load_prepared.py``: workload L's 3,072 per-rollout items, 12,150 facts,
    4,547 distinct, into a fresh clusterer on a shared 2-core machine under load: 0.42 s one by
    one with the collector paused, 0.15 s with :func:`load_prepared` inside a paused collector,
    median of 15).

    Raises:
        ValueError: inconsistent fields (lengths, dtype, shape), naming the field and the value.
    """

    embedder: str | None
    template: str
    filters: tuple[str, ...]
    key_edges: bool
    parts: tuple[tuple[str, str, str], ...]
    texts: tuple[str, ...]
    vectors: np.ndarray | None
    analyses: tuple[FactFeatures, ...] | None
    device: str = "cpu"
    sources: int = 1

    def __post_init__(self) -> None:
        n = len(self.parts)
        if not isinstance(self.device, str) or not self.device or ":" in self.device:
            raise ValueError(f"PreparedFacts: device must be a device kind such as 'cpu' or "
                             f"'cuda' (no index), got {short(self.device)}")
        if type(self.sources) is not int or self.sources < 1:
            raise ValueError(f"PreparedFacts: sources must be an int >= 1, got "
                             f"{short(self.sources)}")
        if len(self.texts) != n:
            raise ValueError(f"PreparedFacts: texts has {len(self.texts)} entries, expected {n} "
                             f"(one per fact)")
        if self.vectors is not None:
            vectors = self.vectors
            if not isinstance(vectors, np.ndarray) or vectors.dtype != np.float32 \
                    or vectors.ndim != 2 or len(vectors) != n:
                shown = (f"{vectors.dtype} {vectors.shape}" if isinstance(vectors, np.ndarray)
                         else type(vectors).__name__)
                raise ValueError(f"PreparedFacts: vectors must be float32 ({n}, d), got {shown}")
            if self.embedder is None:
                raise ValueError("PreparedFacts: vectors given with embedder None (name the model)")
            if vectors.flags.writeable:
                vectors = vectors.copy()
                vectors.setflags(write=False)
                object.__setattr__(self, "vectors", vectors)
        if self.analyses is not None and len(self.analyses) != n:
            raise ValueError(f"PreparedFacts: analyses has {len(self.analyses)} entries, "
                             f"expected {n} (one per fact)")

    def __len__(self) -> int:
        return len(self.parts)

    def __repr__(self) -> str:
        width = None if self.vectors is None else self.vectors.shape[1]
        return (f"PreparedFacts(facts={len(self)}, embedder={self.embedder!r}, dims={width}, "
                f"device={self.device!r}, "
                f"analyses={self.analyses is not None}, template={self.template!r}, "
                f"filters={self.filters!r}, key_edges={self.key_edges!r})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PreparedFacts):
            return NotImplemented
        same_vectors = (self.vectors is None and other.vectors is None) or (
            self.vectors is not None and other.vectors is not None
            and self.vectors.shape == other.vectors.shape
            and np.array_equal(self.vectors, other.vectors))
        return same_vectors and self._head() == other._head() and (
            self.parts, self.texts, self.analyses) == (other.parts, other.texts, other.analyses)

    __hash__ = None  # type: ignore[assignment]  # holds an array

    def _head(self) -> tuple[Any, ...]:
        return (self.embedder, self.template, self.filters, self.key_edges, self.device)

    def mismatch(self, config: FactUtilConfig, embedder_name: str | None,
                 device: str | None = None) -> str | None:
        """Why this work does not fit a clusterer with ``config`` and embedder ``embedder_name``
        on device kind ``device``, or None when it fits: the template must be equal and, in
        semantic mode, the embedder name, the filters and ``key_edges`` too, and the device kind
        when ``config.prepared_device`` is ``"same"`` (and ``device`` is given)."""
        wanted = [("template", self.template, config.triple_template)]
        if config.mode == "semantic":
            wanted += [("embedder", self.embedder, embedder_name),
                       ("filters", self.filters, tuple(config.filters)),
                       ("key_edges", self.key_edges, config.key_edges)]
            if config.prepared_device == "same" and device is not None:
                wanted.append(("device", self.device, device))
        for name, mine, theirs in wanted:
            if mine != theirs:
                return f"{name} {short(mine)}, the clusterer's is {short(theirs)}"
        return None

    # --- the shipped form ------------------------------------------------------------------

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _restore, (shipped.VERSION, self.to_bytes())

    def to_bytes(self) -> bytes:
        """The shipped form (:mod:`factutil.prepared_bytes`: a binary layout, no pickle);
        :meth:`from_bytes` and :func:`load_prepared` read it back.

        Raises:
            ValueError: an analysis holds a value JSON cannot write.
        """
        return shipped.encode(self._head(), self.parts, self.texts, self.vectors, self.analyses,
                              self.sources)

    @classmethod
    def from_bytes(cls, data: bytes) -> PreparedFacts:
        """Read :meth:`to_bytes`' output, or the pickled form older versions shipped (format 1
        or 2: only this module's own restore function may run while loading, no other callable
        of a pickle is accepted). Every field is validated.

        Raises:
            ValueError: not the bytes of a PreparedFacts (the message says what was found).
        """
        try:
            if shipped.is_ours(data):
                return _from_item(shipped.read_header(data))
            work = _load_work(data)
        except ValueError as error:
            raise ValueError(f"PreparedFacts.from_bytes: {error}") from None
        return _merged([work], merge=False)[0]

    @classmethod
    def merge(cls, items: Iterable[PreparedFacts]) -> PreparedFacts:
        """One :class:`PreparedFacts` from several (see :func:`merge_prepared`)."""
        return merge_prepared(items)


class _Work(NamedTuple):
    """One item's fields as the merge reads them, from a :class:`PreparedFacts` or straight from
    its bytes (then ``analyses`` holds plain tuples of the fields after the parts, and a
    FactFeatures is built only for the facts the merge keeps)."""

    head: tuple[Any, ...]  # embedder, template, filters, key_edges, device
    parts: tuple[tuple[str, str, str], ...]
    texts: tuple[str, ...]
    vectors: np.ndarray | None
    analyses: Sequence[Any] | None
    built: bool  # analyses are FactFeatures
    sources: int


class _Args(tuple):
    """The arguments a pickled PreparedFacts gives :func:`_restore`, as loading reads them."""

    def __new__(cls, *args: Any) -> _Args:  # noqa: PYI034 - called as pickle calls _restore
        return super().__new__(cls, args)


def _work_of(item: PreparedFacts) -> _Work:
    return _Work(item._head(), item.parts, item.texts, item.vectors, item.analyses, True,
                 item.sources)


def _read_work(version: Any, head: Any, parts: Any, texts: Any, vectors: Any, analyses: Any,
               sources: Any = 1) -> _Work:
    """A pickled PreparedFacts' arguments, checked, as a :class:`_Work` (no FactFeatures built).

    Raises:
        ValueError: an unknown version or inconsistent fields.
    """
    # version 1 (before the device was recorded) reads as made on the CPU
    if version not in (1, 2) or not isinstance(head, tuple) or len(head) != version + 3:
        raise ValueError(f"PreparedFacts: unknown format version {short(version)} with a head "
                         f"of {short(head)}")
    embedder, template, filters, key_edges, device = (*head, "cpu") if version == 1 else head
    if type(parts) is not tuple or not all(type(p) is tuple and len(p) == 3 for p in parts):
        parts = tuple(tuple(p) for p in parts)
        if any(len(p) != 3 for p in parts):
            raise ValueError("PreparedFacts: parts must be (subject, relation, object) tuples")
    n = len(parts)
    if len(texts) != n:
        raise ValueError(f"PreparedFacts: texts has {len(texts)} entries, expected {n} "
                         f"(one per fact)")
    array = None
    if vectors is not None:
        dims, raw = vectors
        array = np.frombuffer(raw, dtype=np.float32).reshape(n, dims)
    if analyses is not None and (len(analyses) != n or not all(
            len(a) == _ANALYSIS_WIDTH for a in analyses)):
        raise ValueError(f"PreparedFacts: analyses must be {n} tuples of "
                         f"{_ANALYSIS_WIDTH} fields (one per fact)")
    head = (embedder, template, tuple(filters), bool(key_edges), device)
    return _Work(head, parts, tuple(texts), array, analyses, False, sources)


def _restore(*args: Any) -> PreparedFacts:
    if args and args[0] == shipped.VERSION and len(args) == 2:
        return PreparedFacts.from_bytes(args[1])
    return _merged([_read_work(*args)], merge=False)[0]


def _from_item(item: shipped.Item, head: tuple[Any, ...] | None = None) -> PreparedFacts:
    """One item of the shipped form, every fact in its order, every field checked.

    Raises:
        ValueError: a field that is not what it should be (the message names it).
    """
    head = shipped.read_head(item.head) if head is None else head
    decoded = shipped.read_many([item], dedup=False)
    return PreparedFacts(*head[:4], decoded.parts, decoded.texts, decoded.vectors,
                         decoded.analyses, head[4], decoded.sources)


class _RestrictedUnpickler(pickle.Unpickler):
    """No callable runs: this module's restore function is read as its arguments (:class:`_Args`)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == (__name__, "_restore"):
            return _Args
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


def _load_work(data: bytes) -> _Work:
    """:meth:`PreparedFacts.from_bytes` without building the item (see :func:`load_prepared`).

    Raises:
        ValueError: not the bytes of a PreparedFacts (the message says what was found).
    """
    try:
        args = _RestrictedUnpickler(io.BytesIO(data)).load()
        if not isinstance(args, _Args):
            raise ValueError(f"got {type(args).__name__}, expected PreparedFacts")  # noqa: TRY004
        if args and args[0] == shipped.VERSION and len(args) == 2 and type(args[1]) is bytes:
            return _work_of(_from_item(shipped.read_header(args[1])))
        return _read_work(*args)
    except (pickle.UnpicklingError, EOFError, TypeError, ValueError) as error:
        raise ValueError(f"not a PreparedFacts ({error})") from None


def _merged(works: Sequence[_Work], merge: bool = True) -> list[PreparedFacts]:
    """One PreparedFacts from works of one kind (equal heads, analyses on all or none): the
    sorted union of their facts, each fact's work from the first item that has it; with
    ``merge=False`` the one work as it is."""
    first = works[0]
    picks: list[tuple[int, int]] = [(0, row) for row in range(len(first.parts))]
    parts, texts, vectors = first.parts, first.texts, first.vectors
    if merge:
        where: dict[tuple[str, str, str], tuple[int, int]] = {}
        for index, work in enumerate(works):
            for row, key in enumerate(work.parts):
                where.setdefault(key, (index, row))
        parts = tuple(sorted(where))
        picks = [where[key] for key in parts]
        texts = tuple(works[index].texts[row] for index, row in picks)
        if first.vectors is not None:
            dims = {work.vectors.shape[1] for work in works if work.parts}
            if len(dims) > 1:
                raise ValueError(f"merge_prepared: vectors of different widths {sorted(dims)}")
            width = dims.pop() if dims else first.vectors.shape[1]
            vectors = np.empty((len(picks), width), dtype=np.float32)
            for position, (index, row) in enumerate(picks):  # only the rows kept are copied
                vectors[position] = works[index].vectors[row]
    analyses = None
    if first.analyses is not None:
        analyses = tuple(
            works[index].analyses[row] if works[index].built
            else FactFeatures(*parts[position], *works[index].analyses[row])
            for position, (index, row) in enumerate(picks))
    embedder, template, filters, key_edges, device = first.head
    return [PreparedFacts(embedder, template, filters, key_edges, parts, texts, vectors,
                          analyses, device, sum(work.sources for work in works))]


def merge_prepared(items: Iterable[PreparedFacts]) -> PreparedFacts:
    """The union of several :class:`PreparedFacts` made for one config, embedder and device kind.

    Facts present in several items are kept once (their work is equal: it depends on the fact
    alone; each from the first item that has it); the result is sorted by parts, so it does not
    depend on the order of ``items``; its ``sources`` is the sum of theirs.

    Raises:
        ValueError: no item, or items made for different embedders, templates, filters,
            ``key_edges`` or device kinds, or with and without analyses (the message names the
            field and both values).
        TypeError: an item is not a PreparedFacts.
    """
    items = list(items)
    if not items:
        raise ValueError("merge_prepared: no PreparedFacts given")
    for index, item in enumerate(items):
        if not isinstance(item, PreparedFacts):
            raise TypeError(f"merge_prepared: items[{index}] is {type(item).__name__}, "
                            f"expected PreparedFacts")
    first = items[0]
    for index, item in enumerate(items[1:], 1):
        for name, mine, theirs in zip(("embedder", "template", "filters", "key_edges", "device"),
                                      first._head(), item._head()):
            if mine != theirs:
                raise ValueError(f"merge_prepared: items[{index}].{name} is {short(theirs)}, "
                                 f"items[0].{name} is {short(mine)}")
        if (item.analyses is None) != (first.analyses is None):
            raise ValueError(f"merge_prepared: items[{index}] has "
                             f"{'no ' if item.analyses is None else ''}analyses, items[0] "
                             f"{'has none' if first.analyses is None else 'has'}")
    return _merged([_work_of(item) for item in items])[0]


def load_prepared(
    items: Iterable[PreparedFacts | bytes | None],
    *,
    unreadable: list[int] | None = None,
    pause_gc: bool = True,
) -> list[PreparedFacts]:
    """Many shipped items (one per rollout, say) as the few the step needs: one per kind of work.

    Method: with Python's cyclic garbage collector paused (:func:`~factutil.result.gc_paused`:
    reading allocates many small objects and frees none, so collections in the middle of it find
    nothing to free), each item's header is read and checked; None items are skipped; the items
    are grouped by what they were made for (embedder, template, filters, ``key_edges``, device
    kind, with or without analyses, vector width) and each group is merged as
    :func:`merge_prepared` merges, groups in the order their first item came. The items of the
    binary form are read together (:func:`factutil.prepared_bytes.read_many`: their strings and
    vectors joined and cut at once, the facts deduplicated once, only the kept facts' vector rows
    copied and analyses decoded and checked; a dropped duplicate's analysis is not read); when
    that fails, the group's items are read one by one to name the bad ones. Items of the older
    pickled form are read one by one (:meth:`PreparedFacts.from_bytes`). A fact's work depends on
    the fact alone, so the step given the result computes what it computes given the items, bit
    for bit, and visits each distinct fact once. A result's ``sources`` counts the items it
    merges (what a clusterer that ignores it counts).

    Args:
        items: :meth:`PreparedFacts.to_bytes` output (bytes, bytearray, memoryview), PreparedFacts
            or None (nothing shipped), in any mix.
        unreadable: None = an unreadable item raises; a list = the index of each unreadable item
            is appended to it and the item skipped (a trainer's step then does that work itself).
        pause_gc: pause the collector while reading (``FactUtilConfig.pause_gc``).

    Returns:
        list of PreparedFacts, one per kind of work found (usually one; empty when no item).

    Raises:
        ValueError: ``items[i]`` is not a PreparedFacts' bytes (with ``unreadable=None``); the
            message names i and what was found.
        TypeError: ``items[i]`` is neither bytes, a PreparedFacts nor None.
    """
    groups: dict[tuple[Any, ...], list[tuple[int, Any]]] = {}  # kind -> (index, _Work or Item)
    heads: dict[bytes, tuple[Any, ...]] = {}
    errors: dict[int, str] = {}
    with gc_paused(pause_gc):
        for index, item in enumerate(items):
            if item is None:
                continue
            try:
                if isinstance(item, PreparedFacts):
                    entry: Any = _work_of(item)
                elif isinstance(item, (bytes, bytearray, memoryview)):
                    entry = _read_entry(bytes(item), heads)
                else:
                    raise TypeError(f"load_prepared: items[{index}] is {type(item).__name__}, "
                                    f"expected bytes, PreparedFacts or None")
            except ValueError as error:
                errors[index] = str(error)
                continue
            groups.setdefault(_kind(entry, heads), []).append((index, entry))
        loaded = [item for kind, group in groups.items()
                  for item in _merged_group(kind, group, errors)]
    if errors and unreadable is None:
        index = min(errors)
        raise ValueError(f"load_prepared: items[{index}]: {errors[index]}")
    if unreadable is not None:
        unreadable.extend(sorted(errors))
    return loaded


def _read_entry(data: bytes, heads: dict[bytes, tuple[Any, ...]]) -> Any:
    """An item's bytes as :func:`load_prepared` groups them: the shipped form's checked header
    (its head read once per distinct head), or an older pickled item as a :class:`_Work`.

    Raises:
        ValueError: not a PreparedFacts (the message says what was found).
    """
    if not shipped.is_ours(data):
        return _load_work(data)
    try:
        item = shipped.read_header(data)
        if item.head not in heads:
            heads[item.head] = shipped.read_head(item.head)
    except ValueError as error:
        raise ValueError(f"not a PreparedFacts ({error})") from None
    return item


def _kind(entry: Any, heads: dict[bytes, tuple[Any, ...]]) -> tuple[Any, ...]:
    """What an item was made for: head, without analyses, vector width (None without facts)."""
    if isinstance(entry, _Work):
        width = entry.vectors.shape[1] if entry.vectors is not None and entry.parts else None
        return (entry.head, entry.analyses is None, width)
    return _item_kind(heads[entry.head], entry.analyses, entry.dims, entry.vectors, entry.n)


def _item_kind(head: tuple[Any, ...], analyses: bool, dims: int, vectors: bool,
               n: int) -> tuple[Any, ...]:
    """What a shipped item was made for, from its head (read) and header fields."""
    return (head, not analyses, dims if vectors and n else None)


def _merged_group(kind: tuple[Any, ...], group: list[tuple[int, Any]],
                  errors: dict[int, str]) -> list[PreparedFacts]:
    """One kind's items merged (:func:`merge_prepared`): the shipped form's items read together
    (:func:`~factutil.prepared_bytes.read_many`); when that fails, each alone, to name the bad
    ones (added to ``errors``) and merge the rest."""
    head = kind[0]
    fresh = [(index, entry) for index, entry in group if isinstance(entry, shipped.Item)]
    works = [entry for _, entry in group if isinstance(entry, _Work)]
    if fresh:
        try:
            decoded = shipped.read_many([entry for _, entry in fresh])
            merged = PreparedFacts(*head[:4], decoded.parts, decoded.texts, decoded.vectors,
                                   decoded.analyses, head[4], decoded.sources)
        except ValueError:
            alone = []
            for index, entry in fresh:
                try:
                    alone.append(_work_of(_from_item(entry, head)))
                except ValueError as error:
                    errors[index] = f"not a PreparedFacts ({error})"
            works = alone + works
        else:
            if not works:
                return [merged]
            works.insert(0, _work_of(merged))
    return _merged(works) if works else []


FactsInput = Rollout | Mapping[str, Any] | Iterable[Any]


def prepare_facts(
    facts: FactsInput,
    config: FactUtilConfig | Mapping[str, Any] | None = None,
    *,
    embedder: Embedder | None = None,
    clusterer: Any = None,
) -> PreparedFacts:
    """The per-fact work of one rollout or trajectory (docs/method.md §2.1–§2.4), for the batch step.

    Method: the distinct triples (by exact parts) of ``facts`` are read in sorted order; each
    gets its normalised text under ``config.triple_template``; in semantic mode the distinct
    texts are embedded by :func:`~factutil.embed.embed_unique` with the embedder the clusterer
    would use (the same vectors, bit for bit, as the batch step would compute: a vector never
    depends on the texts embedded with it) and, when ``config.filters`` or ``config.key_edges``
    need it, each triple is analysed (:func:`~factutil.filters.analyze`). Of a rollout only the
    actions the batch step reads count: those before the answer and within ``config.max_turns``.

    Args:
        facts: a rollout (a :class:`~factutil.schema.Rollout` or a docs/method.md §8 rollout
            dict, ``actions`` required) or a trajectory: an iterable whose items are action dicts
            or models (structured or ``{"raw": ...}``, parsed as the loader parses them; the
            triples of ``assert`` actions are taken) or triples (:class:`~factutil.schema.Triple`,
            :class:`~factutil.facts.Fact`, ``[s, r, o]`` lists, tuples).
        config: a :class:`FactUtilConfig`, a mapping of its fields, or None: the clusterer's
            config when one is given, else the defaults.
        embedder: the embedder to use; None = the clusterer's, else the one the config names
            (:func:`~factutil.embed.config_embedder`). In a worker that prepares many rollouts,
            pass one embedder or clusterer to every call (a new static embedder loads its table).
        clusterer: a :class:`~factutil.cluster.SemanticClusterer` whose embedder, embedding cache
            and filter cache to use (its config must agree with ``config`` on the fields the work
            depends on); an :class:`~factutil.cluster.ExactClusterer` only means ``mode="exact"``
            when ``config`` is None.

    Returns:
        :class:`PreparedFacts` of n distinct triples; float32 (n, d) vectors in semantic mode.

    Raises:
        TypeError: ``facts`` is neither a rollout nor an iterable (a string is not one).
        ValueError: a bad item (``facts[i]`` or the rollout field and the value named); an
            ``embedder`` and a ``clusterer`` with another embedder; a clusterer built for another
            template, filters, key edges or embedding backend than ``config``.
        pydantic.ValidationError: a bad ``config`` (field and value named).
    """
    config = _config(config, clusterer)
    parts = sorted(set(triples_of(facts, config.max_turns)))
    template = config.triple_template
    texts = tuple(fact_text(*key, template) for key in parts)
    if config.mode == "exact":
        return PreparedFacts(None, template, tuple(config.filters), config.key_edges,
                             tuple(parts), texts, None, None)
    cache = filter_cache = None
    if clusterer is not None and hasattr(clusterer, "embedder"):
        if embedder is not None and embedder is not clusterer.embedder:
            raise ValueError("prepare_facts: embedder and clusterer given, and the clusterer "
                             "has another embedder; pass one of them")
        embedder, cache, filter_cache = clusterer.embedder, clusterer.cache, clusterer.filter_cache
    if embedder is None:
        embedder = config_embedder(config)
    vectors = embed_unique(list(texts), embedder, cache) if parts else None
    if vectors is None:
        vectors = np.zeros((0, 0), dtype=np.float32)
    analyses = None
    if config.filters or config.key_edges:
        # Without a clusterer's, a memo for this call: the parts of one rollout repeat.
        filter_cache = filter_cache if filter_cache is not None else FilterCache()
        analyses = tuple(analyze(*key, cache=filter_cache) for key in parts)
    return PreparedFacts(embedder.name, template, tuple(config.filters), config.key_edges,
                         tuple(parts), texts, vectors, analyses, device_type(embedder))


_CLUSTERER_FIELDS = ("mode", "triple_template", "filters", "key_edges", "embedding_backend",
                     "embedding_model")


def _config(config: Any, clusterer: Any) -> FactUtilConfig:
    own = getattr(clusterer, "config", None)
    if isinstance(clusterer, ExactClusterer):
        own = FactUtilConfig(mode="exact") if config is None else None
    if config is None:
        return own if own is not None else FactUtilConfig()
    if not isinstance(config, FactUtilConfig):
        config = FactUtilConfig.model_validate(dict(config))
    if own is not None:
        differ = [f"{name}: clusterer {short(getattr(own, name))}, config "
                  f"{short(getattr(config, name))}"
                  for name in _CLUSTERER_FIELDS if getattr(own, name) != getattr(config, name)]
        if differ:
            raise ValueError(f"prepare_facts: the clusterer was built for another config "
                             f"({'; '.join(differ)})")
    return config


def triples_of(facts: Any, max_turns: int) -> list[tuple[str, str, str]]:
    """The exact ``(subject, relation, object)`` parts of every triple ``facts`` holds, in order
    (``facts`` as :func:`prepare_facts` takes it; an assert's triples only before the answer and
    within ``max_turns`` actions).

    Raises:
        ValueError, TypeError: ``facts`` is no rollout, trajectory or list of triples (the
            message names the field and value).
    """
    if isinstance(facts, Rollout):
        return _assert_parts(rollout_row(facts)["actions"], max_turns)
    if isinstance(facts, Mapping):
        if "actions" not in facts:
            raise ValueError(f"prepare_facts: a rollout dict needs `actions`, got keys "
                             f"{short(sorted(map(str, facts)))}")
        row = _fast_row(facts)
        if row is None:
            try:
                row = rollout_row(Rollout.model_validate(facts))
            except ValidationError as error:
                where, message = error_messages(error, whole="rollout")[0]
                raise ValueError(f"prepare_facts: {where}: {message}") from None
        return _assert_parts(row["actions"], max_turns)
    if isinstance(facts, (str, bytes)) or not isinstance(facts, Iterable):
        raise TypeError(f"prepare_facts: facts must be a rollout or an iterable of actions or "
                        f"triples, got {short(facts)}")
    out: list[tuple[str, str, str]] = []
    actions: list[dict[str, Any]] = []
    for index, item in enumerate(facts):
        if isinstance(item, (Mapping, BaseModel)) and not isinstance(item, Triple):
            actions.append(_action(item, index))
        else:
            out.append(_parts(item, index))
    return out + _assert_parts(actions, max_turns) if actions else out


def _action(item: Any, index: int) -> dict[str, Any]:
    """One action item as its row form (``{"action": ..., "triples": [[s, r, o], ...]}``)."""
    try:
        action = _VALIDATE_ACTIONS([coerce_action(item)])[0]
    except ValidationError as error:
        where, message = error_messages(error)[0]  # "[0].triples": the one item's index first
        where = f"facts[{index}]" + where.removeprefix("[0]")
        raise ValueError(f"prepare_facts: {where}: {message}") from None
    if isinstance(action, AssertAction):
        return {"action": "assert", "triples": [[t.subject, t.relation, t.object]
                                                for t in action.triples]}
    return {"action": action.action}


def _parts(item: Any, index: int) -> tuple[str, str, str]:
    """A triple item's exact (subject, relation, object), validated as :class:`Triple` is."""
    if isinstance(item, (Triple, Fact)):
        return (item.subject, item.relation, item.object)
    if isinstance(item, (list, tuple)) and len(item) == 3 and all(
            type(part) is str and part.strip() for part in item):
        return (item[0], item[1], item[2])
    try:
        triple = Triple.model_validate(item)
    except ValidationError as error:
        where, message = error_messages(error, whole="")[0]
        raise ValueError(f"prepare_facts: facts[{index}]{'.' + where if where else ''}: "
                         f"{message}") from None
    return (triple.subject, triple.relation, triple.object)


def _assert_parts(actions: Sequence[Mapping[str, Any]], max_turns: int) -> list[tuple[str, str, str]]:
    """The triples of the asserts the batch step reads: before the answer, within max_turns."""
    out: list[tuple[str, str, str]] = []
    for action in actions[:max_turns]:
        kind = action["action"]
        if kind == "assert":
            out.extend(tuple(triple) for triple in action["triples"])
        elif kind == "answer":
            break
    return out
