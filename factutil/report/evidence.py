"""Gold evidence: which clusters hold a gold triple, and how well utility separates them.

A cluster is *gold* when a member has the normalised text (docs/method.md §2.1) of a gold triple
of its question (e.g. the bundled ``2wiki_gold.json``), else a *distractor*. The AUC is the
probability that a gold cluster out-scores a distractor (1.0: always; 0.5: chance).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence

from factutil.api import ClusterRecord
from factutil.cluster import DEFAULT_TEMPLATE, fact_text
from factutil.errors import short


class GoldError(ValueError):
    """A gold-evidence file that cannot be used; the message names the file, uid and field."""


def load_gold(path: str | os.PathLike) -> dict[str, list[list[str]]]:
    """Read gold evidence triples per question: uid -> lists of 3 non-blank strings, from a JSON
    object keyed by uid whose values are lists of triples, or objects whose ``gold`` key holds
    one (``examples/data/2wiki_gold.json``; other keys ignored). Raises GoldError: unreadable
    file, invalid JSON, or a bad entry (``gold.json: 'q1': gold[2]: expected 3 ...``)."""
    name = str(path)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as error:
        raise GoldError(f"{name}: cannot read: {error.strerror or error}") from None
    except RecursionError:
        raise GoldError(f"{name}: invalid JSON: nested too deeply") from None
    except ValueError as error:  # JSON, UTF-8, or an integer past Python's digit limit
        raise GoldError(f"{name}: invalid JSON: {str(error)[:160]}") from None
    if not isinstance(data, dict):
        raise GoldError(f"{name}: expected a JSON object keyed by uid, got {type(data).__name__}")
    gold: dict[str, list[list[str]]] = {}
    for uid, entry in data.items():
        triples = entry.get("gold") if isinstance(entry, Mapping) else entry
        where = "gold" if isinstance(entry, Mapping) else "(value)"
        if not isinstance(triples, list):
            got = short(triples) if where != "gold" or "gold" in entry else (
                f"no `gold` key (keys {short(list(entry))})")
            raise GoldError(f"{name}: {uid!r}: {where}: expected a list of triples, got {got}")
        for k, triple in enumerate(triples):
            if not (isinstance(triple, list) and len(triple) == 3
                    and all(isinstance(part, str) and part.strip() for part in triple)):
                raise GoldError(f"{name}: {uid!r}: {where}[{k}]: expected 3 non-blank strings, "
                                f"got {short(triple)}")
        gold[str(uid)] = [list(triple) for triple in triples]
    return gold


def gold_labels(clusters: Sequence[ClusterRecord], gold: Mapping[str, Sequence[Sequence[str]]],
                template: str = DEFAULT_TEMPLATE) -> list[bool | None]:
    """Per cluster: True (gold) when a member's normalised text under ``template`` is a gold
    triple's of its question (``gold``: uid -> triples, :func:`load_gold`), False
    (distractor), or None when its question has no gold entry."""
    texts = {uid: {fact_text(*triple, template) for triple in triples}
             for uid, triples in gold.items()}
    return [None if (wanted := texts.get(cluster.uid)) is None
            else any(fact_text(*member, template) in wanted for member in cluster.members)
            for cluster in clusters]


def evidence_auc(labels: Sequence[bool | None], utilities: Sequence[float]) -> float | None:
    """AUC in [0, 1] of utility u_c for separating gold clusters from distractors (ties count
    one half) over :func:`gold_labels`' labels (None left out); None without both kinds."""
    from sklearn.metrics import roc_auc_score  # heavy (~3 s): imported when an AUC is asked for

    pairs = [(label, u) for label, u in zip(labels, utilities, strict=True) if label is not None]
    if len({label for label, _ in pairs}) < 2:
        return None
    return float(roc_auc_score([label for label, _ in pairs], [u for _, u in pairs]))


def within_group_auc(labels: Sequence[bool | None], utilities: Sequence[float],
                     uids: Sequence[str]) -> float | None:
    """P(u_gold > u_distractor) + P(tie) / 2 over every (gold, distractor) pair of one question
    (``uids``: per cluster), all questions' pairs pooled; None when no pair exists. Utilities
    are relative to each group's success rate, so this is the comparison a policy update makes.
    """
    by_uid: dict[str, tuple[list[float], list[float]]] = {}
    for label, utility, uid in zip(labels, utilities, uids, strict=True):
        if label is not None:
            by_uid.setdefault(uid, ([], []))[0 if label else 1].append(utility)
    wins = pairs = 0.0
    for gold, distractor in by_uid.values():
        for g in gold:
            wins += sum(1.0 if g > d else 0.5 if g == d else 0.0 for d in distractor)
        pairs += len(gold) * len(distractor)
    return wins / pairs if pairs else None
