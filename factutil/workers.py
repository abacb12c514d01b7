"""Per-fact work made where the rollouts are (docs/method.md §2.2): its one form, the function
the step reads it through (:func:`read_work`) and the rule for whom it fits (:func:`fit_key`).

A work item is a mapping of five keys, its n distinct facts sorted by their parts::

    fit        str              fit_key(config, embedder name): this factutil build, the
                                config's fields that change clusters, the embedder
    device     str              the kind of device the vectors were made on ("cpu", "cuda" ...)
    parts      bytes (n, 3)     each fact's subject, relation and object, UTF-8
    vectors    float32 (n, d)   the embedder's unit vectors of the facts' normalised texts
    truncated  bool (n,)        whether the embedder reads a fact's text only in part

Ray, pickle and verl's TransferQueue move the mapping as it is; a channel of bytes (OpenRLHF's
JSON payload, as base64) carries :func:`work_bytes`, numpy's ``.npz`` of the same keys, read
with ``allow_pickle=False``. No filter analysis travels: the step's clusterer analyses every
fact itself, since a shipped one could only be trusted by redoing it (docs/decisions.md).
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from factutil.cluster import Given, SemanticClusterer
from factutil.config import FactUtilConfig, as_config, clustering_fields
from factutil.embed import device_type
from factutil.errors import short
from factutil.load import action_row

__all__ = ["WORK_FIELDS", "assert_triples", "build_id", "fit_key", "make_work", "read_work",
           "work_bytes", "work_items"]

WORK_FIELDS = ("fit", "device", "parts", "vectors", "truncated")
"""The keys of a work item, in the order of the module's table."""


@cache  # a constant of the code this process runs, read once
def build_id() -> str:
    """This factutil's version and a digest of its source files: work made by another build (a
    rolling restart, a half-upgraded cluster) never fits, whatever its version says."""
    try:
        version = metadata.version("factutil")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        version = "unknown"
    root = Path(__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".tsv"):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return f"{version}+{digest.hexdigest()[:12]}"


def fit_key(config: FactUtilConfig, embedder: str) -> str:
    """The fit a work item carries: ``"<build>:<16 hex digits>"``, a digest of :func:`build_id`,
    :func:`~factutil.config.clustering_fields` of ``config`` and the embedder's ``name``. Work
    fits a step whose key is equal."""
    fields = sorted(clustering_fields(config).items())
    digest = hashlib.sha256(json.dumps([build_id(), fields, embedder], default=str).encode())
    return f"{build_id()}:{digest.hexdigest()[:16]}"


def assert_triples(actions: Sequence[Any], max_turns: int) -> list[tuple[str, str, str]]:
    """The ``(subject, relation, object)`` of each triple a rollout's actions assert before its
    answer and within ``max_turns`` actions (what the step reads). ``actions``: action models or
    their row dicts (:func:`factutil.load.action_row`); TypeError for anything else."""
    out: list[tuple[str, str, str]] = []
    for action in actions[:max_turns]:
        row = action if isinstance(action, Mapping) else action_row(action)
        if row.get("action") == "assert":
            out += map(tuple, row["triples"])
        elif row.get("action") == "answer":
            break
    return out


def make_work(triples: Iterable[Sequence[str]], config: FactUtilConfig | Mapping[str, Any] | None
              = None, clusterer: SemanticClusterer | None = None) -> dict[str, Any]:
    """The work item of some facts (docs/method.md §2.2): the distinct ``triples``
    (``(subject, relation, object)``, three non-blank strings each), their vectors from the
    embedder the step's clusterer would use (through its cache: the same bits) and their
    truncation flags. In exact mode the vectors are (n, 0): there is nothing to embed.

    ``config``: a :class:`FactUtilConfig` or a mapping of its fields (None: the clusterer's,
    else the defaults). ``clusterer``: the worker's :class:`~factutil.cluster.SemanticClusterer`
    (keep one per worker: the model loads once); None: one made for ``config``. Raises
    ValueError for a triple that is not three non-blank strings (its index named) or a
    clusterer built for another config; TypeError for a config of the wrong type.
    """
    own = getattr(clusterer, "config", None)
    config = own if config is None and own is not None else as_config(config)
    if own is not None and clustering_fields(own) != clustering_fields(config):
        raise ValueError("make_work: the clusterer was built for another clustering config")
    parts = sorted({_triple(triple, index) for index, triple in enumerate(triples)})
    encoded = np.char.encode(np.array(parts, dtype=str).reshape(-1, 3), "utf-8", "surrogatepass")
    if config.mode == "exact":
        return {"fit": fit_key(config, ""), "device": "cpu", "parts": encoded,
                "vectors": np.zeros((len(parts), 0), np.float32),
                "truncated": np.zeros(len(parts), dtype=bool)}
    clusterer = clusterer if clusterer is not None else SemanticClusterer(config)
    vectors, truncated = clusterer.embed_facts(parts)
    return {"fit": fit_key(config, clusterer.embedder.name),
            "device": device_type(clusterer.embedder), "parts": encoded, "vectors": vectors,
            "truncated": truncated}


def _triple(triple: Any, index: int) -> tuple[str, str, str]:
    if (isinstance(triple, (list, tuple)) and len(triple) == 3
            and all(isinstance(part, str) and part.strip() for part in triple)):
        return (triple[0], triple[1], triple[2])
    raise ValueError(f"make_work: triples[{index}] is not three non-blank strings: "
                     f"{short(triple, 80)}")


def work_bytes(work: Mapping[str, Any]) -> bytes:
    """A work item as numpy's ``.npz`` (uncompressed), for channels that carry only bytes."""
    buffer = io.BytesIO()
    np.savez(buffer, **{name: np.asarray(work[name]) for name in WORK_FIELDS})
    return buffer.getvalue()


def read_work(work: Any, fit: str, device: str, dims: int, same_device: bool = False,
              ) -> tuple[Given, dict[str, float], list[str]]:
    """The step's reading of worker work (its ``work=``): each item checked alone.

    Args:
        work: one item (a mapping of :data:`WORK_FIELDS` or its :func:`work_bytes`) or a
            sequence of items (None items skipped).
        fit, device, dims: the step's :func:`fit_key`, device kind and vector width.
        same_device: ignore items made on another kind of device.

    Returns:
        ``(given, counts, warnings)``: the facts of the items that check out with their vectors
        and flags (the first of a fact repeated); ``work_ignored`` (another fit or device),
        ``work_unreadable`` (not the form: wrong keys, types, shapes, dtypes, vectors that are
        not finite unit rows of width ``dims``, parts that are not non-blank UTF-8) and
        ``work_other_device`` (facts of items used from another kind of device); at most one
        warning per kind. Never raises: the step computes the facts of every item left out.
    """
    items = work_items(work)
    ignored: Counter[str] = Counter()
    other: Counter[str] = Counter()
    unreadable: list[str] = []
    fitting = []  # the fields of each item of the right form and fit
    for item in items:
        if item is None:
            continue
        try:
            fields = _form(item, dims)
        except _UNREADABLE as error:
            kind = "" if type(error) is ValueError else f"{type(error).__name__}: "
            unreadable.append(f"{kind}{error!s:.200}")
            continue
        if fields[0] != fit:
            ignored[f"fit {fields[0]!r:.60}, not {fit!r}"] += 1
        elif fields[1] != device and same_device:
            ignored[f"device {fields[1]!r:.20}, not {device!r}"] += 1
        else:
            fitting.append(fields)
    given, kept, bad = _content(fitting, dims)
    unreadable += bad
    for fields, keep in zip(fitting, kept):
        if keep and fields[1] != device:
            other[fields[1]] += len(fields[2])
    warnings = []
    if ignored:
        warnings.append(
            f"{ignored.total()} work item(s) ignored, made for another clustering config, "
            f"embedder, factutil build or device (their facts are computed here): "
            + "; ".join(f"{n} with {reason}" for reason, n in sorted(ignored.items())))
    if unreadable:
        warnings.append(f"{len(unreadable)} work item(s) ignored, unreadable (their facts are "
                        f"computed here): {unreadable[0]}")
    if other:
        warnings.append(
            f"{other.total()} fact(s) of work embedded on another kind of device than this "
            f"step's embedder ({device}): " + "; ".join(f"{n} on {kind}" for kind, n in
                                                        sorted(other.items()))
            + "; their vectors are used and differ from this device's by float rounding "
            "(config prepared_device='same' ignores them)")
    counts = {"work_ignored": float(ignored.total()), "work_unreadable": float(len(unreadable)),
              "work_other_device": float(other.total())}
    return given, counts, warnings


def work_items(work: Any) -> list[Any]:
    """A step's ``work=`` as its items: a mapping or bytes is one item, and so is anything that
    cannot be iterated (for :func:`read_work` to refuse); a sequence, its items."""
    if isinstance(work, (Mapping, bytes, bytearray, memoryview)):
        return [work]
    try:
        return list(work)
    except Exception:  # noqa: BLE001 - not a sequence of items: one item, refused when read
        return [work]


_UNREADABLE = (ValueError, TypeError, KeyError, AttributeError, RecursionError, MemoryError,
               OverflowError)


def _form(item: Any, dims: int) -> tuple[str, str, np.ndarray, np.ndarray, np.ndarray]:
    """One item's fields if their types, shapes and dtypes are the form's; ValueError saying
    what is wrong."""
    if isinstance(item, (bytes, bytearray, memoryview)):
        item = _npz(bytes(item))
    if not isinstance(item, Mapping) or set(item) != set(WORK_FIELDS):
        keys = sorted(map(str, item)) if isinstance(item, Mapping) else None
        raise ValueError(f"not a work item ({type(item).__name__}"
                         f"{f' of keys {short(keys, 120)}' if keys is not None else ''}; a work "
                         f"item has the keys {list(WORK_FIELDS)})")
    fit, device, parts, vectors, cut = (item[name] for name in WORK_FIELDS)
    fit, device = (str(value) if isinstance(value, str) or isinstance(value, np.ndarray)
                   and value.shape == () and value.dtype.kind == "U" else None
                   for value in (fit, device))
    if fit is None or device is None:
        raise ValueError("fit and device must be strings")
    if not (isinstance(parts, np.ndarray) and parts.dtype.kind == "S" and parts.ndim == 2
            and parts.shape[1] == 3):
        raise ValueError(f"parts must be bytes (n, 3), got {_shape(parts)}")
    n = len(parts)
    if not (isinstance(vectors, np.ndarray) and vectors.dtype == np.float32
            and vectors.shape == (n, dims)):
        raise ValueError(f"vectors must be float32 ({n}, {dims}), got {_shape(vectors)}")
    if not (isinstance(cut, np.ndarray) and cut.dtype == bool and cut.shape == (n,)):
        raise ValueError(f"truncated must be bool ({n},), got {_shape(cut)}")
    return fit, device, parts, vectors, cut


def _content(items: Sequence[tuple], dims: int) -> tuple[Given, list[bool], list[str]]:
    """The facts of the items whose vectors are finite unit rows and whose parts are non-blank
    UTF-8, checked for all items at once; per item whether it is kept; why each other item was
    left out."""
    sizes = [len(fields[2]) for fields in items]
    if not sum(sizes):
        return Given([], np.zeros((0, dims), np.float32), np.zeros(0, bool)), [True] * len(items), []
    owner = np.repeat(np.arange(len(items)), sizes)
    vectors = np.concatenate([fields[3] for fields in items])
    with np.errstate(all="ignore"):
        norms = np.einsum("ij,ij->i", vectors, vectors, dtype=np.float64)
    reasons = {int(owner[row]): f"vector {row - sum(sizes[:owner[row]])} is not a finite unit "
               f"vector" for row in np.flatnonzero(~(np.abs(norms - 1.0) <= 1e-3))[::-1]}
    encoded = np.concatenate([fields[2] for fields in items]).tolist()
    parts = []  # a lone surrogate (a JSON escape cut short) is text the step reads too
    for row, three in enumerate(encoded):
        try:
            parts.append(tuple(part.decode("utf-8", "surrogatepass") for part in three))
        except UnicodeDecodeError as error:
            reasons.setdefault(int(owner[row]), f"parts are not UTF-8 ({error})")
            parts.append(("", "", ""))
    for row, (s, r, o) in enumerate(parts):
        if not (s.strip() and r.strip() and o.strip()):
            reasons.setdefault(int(owner[row]), "a part is blank")
    kept = [index not in reasons for index in range(len(items))]
    rows = np.repeat(np.array(kept), sizes)
    given = Given([three for three, keep in zip(parts, rows.tolist()) if keep], vectors[rows],
                  np.concatenate([fields[4] for fields in items])[rows])
    return given, kept, [reasons[index] for index in sorted(reasons)]


def _shape(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype} {value.shape}"
    return type(value).__name__


def _npz(data: bytes) -> dict[str, np.ndarray]:
    """The arrays of :func:`work_bytes`' output; ValueError for anything else. Members must be
    stored uncompressed within the data (no decompression bomb); nothing is unpickled."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            if any(info.compress_type != zipfile.ZIP_STORED or info.file_size > len(data)
                   for info in archive.infolist()):
                raise ValueError("a member is compressed or larger than the data")
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    except (ValueError, OSError, EOFError, MemoryError, zipfile.BadZipFile, KeyError) as error:
        raise ValueError(f"not a work item's bytes ({type(error).__name__}: "
                         f"{error!s:.200})") from None
