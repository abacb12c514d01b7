"""Per-fact work made where the rollouts are (docs/method.md §2.1–§2.4), and the one rule for
what a config's clusters depend on (:func:`clustering_fit`).

A fact's normalised text, embedding and filter analysis depend on that fact alone, so a rollout
worker can make them for its share (:func:`make_work`) and ship a :class:`FactWork` (numpy arrays
and lists, or ``.npz`` bytes for a channel of bytes or JSON). The step (``work=``) caches what
fits its clusterer and computes the rest, so its results are the same bit for bit.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import numpy as np
from pydantic import BaseModel, TypeAdapter, ValidationError

from factutil.actions import Action, AssertAction, Triple
from factutil.config import FactUtilConfig, as_config
from factutil.embed import config_embedder, device_type, embed_unique, truncated_texts
from factutil.errors import error_messages, short
from factutil.facts import Fact, fact_text
from factutil.filters import FactFeatures, FilterCache, analyze
from factutil.filters.features import fact_key, is_negated, is_symmetric
from factutil.load import rollout_row
from factutil.schema import Rollout, coerce_action

__all__ = ["CLUSTERING_FIELDS", "FactWork", "analysis_values", "check_unit", "clusterer_mismatch",
           "clustering_fit", "features_from", "fit_key", "make_work", "triples_of"]

CLUSTERING_FIELDS = (
    "triple_template", "embedding_model", "embedding_backend", "sim_threshold", "sim_decimals",
    "filters", "key_edges", "knn_min_size", "knn_k", "hnsw_m", "hnsw_ef", "hnsw_seed",
)
"""The config fields a semantic clusterer's clusters depend on (device, batch size and cache
bounds change vectors only by float rounding, which the embedder's name in a work's fit covers)."""

_VALIDATE_ACTIONS = TypeAdapter(list[Action]).validate_python


def _version() -> str:
    try:
        return metadata.version("factutil")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def clustering_fit(config: FactUtilConfig, embedder: str | None = None) -> tuple[tuple[str, Any], ...]:
    """What clusters made under ``config`` depend on, as ``(name, value)`` pairs: the factutil
    version, ``mode``, in semantic mode every field of :data:`CLUSTERING_FIELDS`, and
    ``embedder`` (an embedder's ``name``) when given. Two fits are compatible when equal."""
    fit: list[tuple[str, Any]] = [("version", _version()), ("mode", config.mode)]
    if config.mode == "semantic":
        fit += [(name, _plain(getattr(config, name))) for name in CLUSTERING_FIELDS]
    if embedder is not None:
        fit.append(("embedder", embedder))
    return tuple(fit)


def fit_key(fit: Sequence[tuple[str, Any]]) -> str:
    """The short name of a fit that work carries (one work item ships per rollout):
    ``"<version>:<16 hex digits of the fit's digest>"``."""
    digest = hashlib.sha256(json.dumps(list(fit), default=str).encode()).hexdigest()[:16]
    return f"{dict(fit).get('version')}:{digest}"


def _plain(value: Any) -> Any:
    """Sequences as tuples, so a list and a tuple compare equal."""
    return tuple(_plain(item) for item in value) if isinstance(value, (list, tuple)) else value


def clusterer_mismatch(own: Sequence[tuple[str, Any]], config: FactUtilConfig) -> str | None:
    """Why a clusterer whose :func:`clustering_fit` is ``own`` cannot cluster for ``config``:
    ``"name: clusterer X, config Y; ..."`` per differing field (only ``mode`` when the modes
    differ), or None when they fit."""
    a, b = dict(own), dict(clustering_fit(config))
    differ = [(name, a.get(name), b.get(name)) for name in dict.fromkeys([*a, *b])
              if a.get(name) != b.get(name)]  # a name one side lacks: None there
    differ = [field for field in differ if field[0] == "mode"] or differ
    return "; ".join(f"{name}: clusterer {mine!r}, config {theirs!r}"
                     for name, mine, theirs in differ) or None


@dataclass(frozen=True, eq=False)
class FactWork:
    """The per-fact work of n distinct facts (docs/method.md §2.1–§2.4), sorted by their parts.

    ``fit``: :func:`fit_key` of its config and embedder's :func:`clustering_fit`; ``device``: the
    device kind of the vectors (``"cpu"``, ``"cuda"`` …: two kinds differ by float rounding);
    ``subjects``, ``relations``, ``objects``: n str each; ``vectors``: float32 (n, d),
    L2-normalised, None in exact mode; ``analyses``: per fact :func:`analysis_values`, None when
    no filter or key edge needs them; ``truncated``: per fact whether the embedder reads its text
    only in part, None: the step asks its own embedder. Raises ValueError for fields of different
    lengths, vectors not float32 (n, d) or ``truncated`` not bools.
    """

    fit: str
    device: str
    subjects: list[str]
    relations: list[str]
    objects: list[str]
    vectors: np.ndarray | None
    analyses: list[list[Any]] | None
    truncated: list[bool] | None = None

    def __post_init__(self) -> None:
        n = len(self.subjects)
        sizes = {"relations": len(self.relations), "objects": len(self.objects)}
        sizes |= {name: len(column) for name in ("analyses", "truncated")
                  if (column := getattr(self, name)) is not None}
        if self.truncated is not None and not all(type(flag) is bool for flag in self.truncated):
            raise ValueError("FactWork: truncated must hold bools")
        for name, size in sizes.items():
            if size != n:
                raise ValueError(f"FactWork: {name} has {size} entries, subjects {n}")
        vectors = self.vectors
        if vectors is not None and (not isinstance(vectors, np.ndarray) or vectors.dtype != np.float32
                                    or vectors.ndim != 2 or len(vectors) != n):
            shown = (f"{vectors.dtype} {vectors.shape}" if isinstance(vectors, np.ndarray)
                     else type(vectors).__name__)
            raise ValueError(f"FactWork: vectors must be float32 ({n}, d), got {shown}")

    def __len__(self) -> int:
        return len(self.subjects)

    def __repr__(self) -> str:
        width = None if self.vectors is None else self.vectors.shape[1]
        return (f"FactWork(facts={len(self)}, dims={width}, device={self.device!r}, "
                f"analyses={self.analyses is not None}, fit={self.fit!r})")

    @property
    def parts(self) -> list[tuple[str, str, str]]:
        """Each fact's ``(subject, relation, object)``."""
        return list(zip(self.subjects, self.relations, self.objects))

    def features(self) -> list[FactFeatures]:
        """Each fact's :func:`features_from`; ValueError without analyses or for a bad one."""
        if self.analyses is None:
            raise ValueError("FactWork: no analyses")
        return [features_from(parts, values) for parts, values in zip(self.parts, self.analyses)]

    @classmethod
    def of(cls, item: Any) -> FactWork:
        """``item`` as a FactWork: a FactWork, the mapping of its fields (what a msgpack channel
        such as verl's TransferQueue gives back), or its bytes; ValueError for anything else."""
        if isinstance(item, cls):
            return item
        if isinstance(item, Mapping):
            try:
                return cls(**item)
            except TypeError as error:
                raise ValueError(f"FactWork.of: not a FactWork's fields ({error})") from None
        if not isinstance(item, (bytes, bytearray, memoryview)):  # bytes(10**12) would allocate
            raise ValueError(f"FactWork.of: not a FactWork, fields or bytes: "  # noqa: TRY004
                             f"{type(item).__name__} {short(item)}")
        return cls.from_bytes(item)

    @classmethod
    def items_of(cls, work: Any) -> list[Any]:
        """A step's ``work=`` as its items: a FactWork, its bytes or its field mapping is one item,
        and so is anything not iterable (for :meth:`of` to refuse); a sequence, its items."""
        single = isinstance(work, (cls, bytes, bytearray, memoryview, Mapping))
        return [work] if single or not isinstance(work, Iterable) else list(work)

    def to_bytes(self) -> bytes:
        """This work as numpy's ``.npz`` (strings as unicode arrays; fit, device, analyses and
        truncated as JSON text), for channels that carry only bytes."""
        arrays = {name: np.array(getattr(self, name), dtype=str)
                  for name in ("subjects", "relations", "objects")}
        head = {"fit": self.fit, "device": self.device, "analyses": self.analyses,
                "truncated": self.truncated}
        arrays["head"] = np.array(json.dumps(head, ensure_ascii=False))
        if self.vectors is not None:
            arrays["vectors"] = self.vectors
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> FactWork:
        """Read :meth:`to_bytes`' output; nothing runs and every field is checked. Raises
        ValueError (saying what) for truncated or changed bytes, sizes beyond the data, a bad
        head, lengths that disagree or vectors that are not finite unit vectors."""
        try:
            arrays = _read_npz(bytes(data))
            head = json.loads(str(arrays.pop("head")[()]))
            keys = {"fit", "device", "analyses"}
            if not isinstance(head, dict) or not keys <= set(head) <= keys | {"truncated"}:
                raise ValueError("the head is not {fit, device, analyses[, truncated]}")
            fit, device, analyses = head["fit"], head["device"], head["analyses"]
            truncated = head.get("truncated")
            if not isinstance(fit, str) or not isinstance(device, str) \
                    or analyses is not None and not isinstance(analyses, list) \
                    or truncated is not None and not isinstance(truncated, list):
                raise ValueError("fit, device, analyses or truncated of the wrong type")
            strings = {}
            for name in ("subjects", "relations", "objects"):
                column = arrays.pop(name)
                if column.dtype.kind != "U" or column.ndim != 1:
                    raise ValueError(f"{name} is {column.dtype} {column.shape}, not strings")
                strings[name] = column.tolist()
            vectors = arrays.pop("vectors", None)
            if arrays:
                raise ValueError(f"unknown members {sorted(arrays)}")
            if vectors is not None:
                check_unit(vectors)
            work = cls(fit, device, **strings, vectors=vectors, analyses=analyses,
                       truncated=truncated)
            if analyses is not None:
                work.features()
        except (ValueError, TypeError, KeyError, OSError, EOFError, RecursionError,
                MemoryError, OverflowError, zipfile.BadZipFile) as error:
            raise ValueError(f"FactWork.from_bytes: not a FactWork's bytes "
                             f"({type(error).__name__}: {error!s:.200})") from None
        return work


def _read_npz(data: bytes) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` (no pickle), each member's declared size checked against its
    bytes before anything is allocated."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for info in archive.infolist():
            if info.compress_type != zipfile.ZIP_STORED or info.file_size > len(data):
                raise ValueError(f"member {info.filename!r} is compressed or larger than the data")
            with archive.open(info) as member:
                version = np.lib.format.read_magic(member)
                read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)
                shape, _, dtype = read_header(member)
                declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
                if dtype.hasobject or declared != info.file_size - member.tell():
                    raise ValueError(f"member {info.filename!r} declares {shape} {dtype} in "
                                     f"{info.file_size - member.tell()} bytes")
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


def check_unit(vectors: np.ndarray) -> None:
    """Raise ValueError unless ``vectors`` are float32 (n, d) finite unit rows (naming the first
    bad row): a changed value must not reach the similarities as an overflow or a NaN."""
    if vectors.dtype != np.float32 or vectors.ndim != 2:
        raise ValueError(f"vectors are {vectors.dtype} {vectors.shape}, not float32 (n, d)")
    with np.errstate(all="ignore"):
        norms = np.einsum("ij,ij->i", vectors, vectors, dtype=np.float64)
    bad = ~(np.abs(norms - 1.0) <= 1e-3)
    if bad.any():
        raise ValueError(f"vector {int(np.flatnonzero(bad)[0])} is not a finite unit vector")


def analysis_values(f: FactFeatures) -> list[Any]:
    """A fact's analysis as plain JSON values: the :class:`~factutil.filters.FactFeatures` fields
    that the parts and the other fields do not determine."""
    return [f.subject_key, f.object_key, f.relation_id, f.inverse, f.relation_key,
            list(f.negation_cues), sorted(f.words), [list(q) for q in f.quantities]]


def features_from(parts: tuple[str, str, str], values: Any) -> FactFeatures:
    """The :class:`~factutil.filters.FactFeatures` of the fact ``parts`` from its
    :func:`analysis_values`, derived fields by :func:`~factutil.filters.analyze`'s rules. Raises
    ValueError (the fact named) when ``values`` are not an analysis's."""
    try:
        subject_key, object_key, relation_id, inverse, relation_key, cues, words, quantities = values
        "".join((subject_key, object_key, relation_key, relation_id or "", *cues, *words))
        if type(inverse) is not bool or type(cues) is not list or type(words) is not list:
            raise TypeError("inverse must be a bool, cues and words lists")  # join: all str
        cues = tuple(cues)
        if type(quantities) is not list or not all(type(q) is list for q in quantities):
            raise TypeError("quantities must be a list of lists")
        quantities = tuple(map(tuple, quantities)) if quantities else ()
        hash(quantities)  # a list or mapping inside a quantity raises TypeError
        negated = is_negated(cues)
        return FactFeatures(*parts, subject_key, object_key, relation_id, inverse, negated,
                            quantities, fact_key(relation_key, subject_key, object_key, negated,
                                                 quantities),
                            relation_key, is_symmetric(relation_id), cues, frozenset(words))
    except (TypeError, ValueError, KeyError) as error:
        raise ValueError(f"the analysis of {parts!r:.80} is not one ({error!s:.80})") from None


def make_work(items: Any, config: FactUtilConfig | Mapping[str, Any] | None = None,
              clusterer: Any = None) -> FactWork:
    """The per-fact work of a worker's share of rollouts (docs/method.md §2.1–§2.4): the
    distinct triples of ``items`` (:func:`triples_of`) and, in semantic mode, their vectors from
    the embedder the step's clusterer would use (through :func:`~factutil.embed.embed_unique`:
    the same bit for bit), their truncation flags and, when needed, their analyses.

    ``config``: a :class:`FactUtilConfig` or a mapping of its fields (None: the clusterer's, else
    the defaults). ``clusterer``: a :class:`~factutil.cluster.SemanticClusterer` whose embedder
    and caches to use (keep one per worker: the model loads once); None: the config's embedder.
    Raises TypeError or ValueError as :func:`triples_of` or for a clusterer built for another
    config, pydantic.ValidationError for a bad ``config``.
    """
    own = getattr(clusterer, "config", None)
    config = own if config is None and own is not None else as_config(config)
    differ = None if own is None else clusterer_mismatch(clustering_fit(own), config)
    if differ:
        raise ValueError(f"make_work: the clusterer was built for another config ({differ})")
    parts = sorted(set(triples_of(items, config.max_turns)))
    subjects, relations, objects = (list(column) for column in zip(*parts)) if parts else ([], [], [])
    if config.mode == "exact":
        return FactWork(fit_key(clustering_fit(config)), "cpu", subjects, relations, objects,
                        None, None)
    texts = [fact_text(*key, config.triple_template) for key in parts]
    embedder = getattr(clusterer, "embedder", None) or config_embedder(config)
    cache = getattr(clusterer, "cache", None)
    vectors = embed_unique(texts, embedder, cache) if parts else np.zeros((0, 0), np.float32)
    truncated = truncated_texts(texts, embedder).tolist()
    analyses = None
    if config.filters or config.key_edges:
        filter_cache = getattr(clusterer, "filter_cache", None) or FilterCache()
        analyses = [analysis_values(analyze(*key, cache=filter_cache)) for key in parts]
    return FactWork(fit_key(clustering_fit(config, embedder.name)), device_type(embedder),
                    subjects, relations, objects, vectors, analyses, truncated)


def triples_of(items: Any, max_turns: int) -> list[tuple[str, str, str]]:
    """The exact ``(subject, relation, object)`` of every triple ``items`` holds, in order.

    ``items``: a rollout (:class:`~factutil.schema.Rollout` or docs/method.md §8 dict) or an
    iterable of rollouts, action lists, actions (dicts or models: together one trajectory) and
    triples (:class:`~factutil.schema.Triple`, :class:`~factutil.facts.Fact`, ``[s, r, o]``).
    Of a trajectory only the asserts before its answer and within ``max_turns`` actions count.
    Raises ValueError or TypeError for an item that is none of these (index and value named).
    """
    if isinstance(items, Rollout):
        return _assert_parts(rollout_row(items)["actions"], max_turns)
    if isinstance(items, Mapping):
        if "actions" not in items:
            raise ValueError(f"make_work: a rollout dict needs `actions`, got keys "
                             f"{short(sorted(map(str, items)))}")
        try:
            row = rollout_row(Rollout.model_validate(items))
        except ValidationError as error:
            where, message = error_messages(error, whole="rollout")[0]
            raise ValueError(f"make_work: {where}: {message}") from None
        return _assert_parts(row["actions"], max_turns)
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise TypeError(f"make_work: items must be rollouts, actions or triples, got "
                        f"{short(items)}")
    out: list[tuple[str, str, str]] = []
    actions: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        if isinstance(item, Rollout) or isinstance(item, Mapping) and "actions" in item:
            out += triples_of(item, max_turns)
        elif isinstance(item, (Mapping, BaseModel)) and not isinstance(item, Triple):
            actions.append(_action(item, index))
        elif isinstance(item, (list, tuple)) and not _is_triple(item) and not isinstance(item, Fact):
            out += triples_of(item, max_turns)
        else:
            out.append(_parts(item, index))
    return out + _assert_parts(actions, max_turns) if actions else out


def _is_triple(item: Sequence[Any]) -> bool:
    return len(item) == 3 and all(isinstance(part, str) for part in item)


def _action(item: Any, index: int) -> dict[str, Any]:
    """One action item in its row form (``{"action": ..., "triples": [[s, r, o], ...]}``)."""
    try:
        action = _VALIDATE_ACTIONS([coerce_action(item)])[0]
    except ValidationError as error:
        where, message = error_messages(error)[0]  # "[0].triples": the one item's index first
        raise ValueError(f"make_work: items[{index}]{where.removeprefix('[0]')}: {message}") from None
    if isinstance(action, AssertAction):
        return {"action": "assert", "triples": [[t.subject, t.relation, t.object]
                                                for t in action.triples]}
    return {"action": action.action}


def _parts(item: Any, index: int) -> tuple[str, str, str]:
    """A triple item's exact parts, validated as :class:`Triple` is."""
    if isinstance(item, (Triple, Fact)):
        return (item.subject, item.relation, item.object)
    if isinstance(item, (list, tuple)) and _is_triple(item) and all(part.strip() for part in item):
        return (item[0], item[1], item[2])
    try:
        triple = Triple.model_validate(item)
    except ValidationError as error:
        where, message = error_messages(error, whole="")[0]
        raise ValueError(f"make_work: items[{index}]{'.' + where if where else ''}: "
                         f"{message}") from None
    return (triple.subject, triple.relation, triple.object)


def _assert_parts(actions: Sequence[Mapping[str, Any]], max_turns: int) -> list[tuple[str, str, str]]:
    """The triples of the asserts the step reads: before the answer, within max_turns."""
    out: list[tuple[str, str, str]] = []
    for action in actions[:max_turns]:
        kind = action["action"]
        if kind == "assert":
            out.extend(tuple(triple) for triple in action["triples"])
        elif kind == "answer":
            break
    return out
