"""Gold evidence: which clusters hold a gold triple, and how well utility separates them.

Where the gold evidence of each question is known (the bundled 2Wiki sample's
``2wiki_gold.json``), a cluster is *gold* when one of its members has the normalised text
(docs/method.md §2.1) of a gold triple of its question, and *distractor* otherwise. The AUC of utility for
telling them apart is the probability that a gold cluster out-scores a distractor (1.0: every
gold cluster above every distractor; 0.5: chance). The report and ``examples/credit_check.py``
both use these functions.
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
    """Read gold evidence triples per question.

    Args:
        path: a JSON object keyed by uid; each value is either a list of triples
            ``[[subject, relation, object], ...]`` or an object whose ``gold`` key holds that list
            (the layout of ``examples/data/2wiki_gold.json``, whose other keys are ignored).

    Returns:
        uid -> gold triples, each a list of 3 non-blank strings.

    Raises:
        GoldError: unreadable file, invalid JSON, or a bad entry (the message names the uid and
            the field, e.g. ``gold.json: 'q1': gold[2]: expected 3 non-blank strings, got [...]``).
    """
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
            raise GoldError(
                f"{name}: {uid!r}: {where}: expected a list of triples, got {short(triples)}"
            )
        for k, triple in enumerate(triples):
            if not (
                isinstance(triple, list)
                and len(triple) == 3
                and all(isinstance(part, str) and part.strip() for part in triple)
            ):
                raise GoldError(
                    f"{name}: {uid!r}: {where}[{k}]: expected 3 non-blank strings, got "
                    f"{short(triple)}"
                )
        gold[str(uid)] = [list(triple) for triple in triples]
    return gold


def gold_labels(
    clusters: Sequence[ClusterRecord],
    gold: Mapping[str, Sequence[Sequence[str]]],
    template: str = DEFAULT_TEMPLATE,
) -> list[bool | None]:
    """Per cluster: True when a member's normalised text is a gold triple's of its question.

    Args:
        clusters: the clusters of a result (:attr:`ProcessAdvantages.clusters`).
        gold: uid -> gold triples (:func:`load_gold`); letter case and spacing do not matter.
        template: the ``triple_template`` the clusters were built with.

    Returns:
        one label per cluster, in order: True (gold), False (distractor), or None when its
        question has no gold entry.
    """
    texts = {
        uid: {fact_text(*triple, template) for triple in triples} for uid, triples in gold.items()
    }
    labels: list[bool | None] = []
    for cluster in clusters:
        wanted = texts.get(cluster.uid)
        if wanted is None:
            labels.append(None)
        else:
            labels.append(any(fact_text(*member, template) in wanted for member in cluster.members))
    return labels


def evidence_auc(labels: Sequence[bool | None], utilities: Sequence[float]) -> float | None:
    """AUC of utility for separating gold clusters from distractors (ties count one half).

    Args:
        labels: per cluster, True / False / None (left out), as :func:`gold_labels` gives.
        utilities: per cluster, its utility u_c.

    Returns:
        the AUC in [0, 1], or None when there is no gold or no distractor cluster.
    """
    from sklearn.metrics import roc_auc_score  # heavy (~3 s): imported when an AUC is asked for

    pairs = [(label, u) for label, u in zip(labels, utilities, strict=True) if label is not None]
    if len({label for label, _ in pairs}) < 2:
        return None
    return float(roc_auc_score([label for label, _ in pairs], [u for _, u in pairs]))


def within_group_auc(
    labels: Sequence[bool | None], utilities: Sequence[float], uids: Sequence[str]
) -> float | None:
    """P(u_gold > u_distractor) + P(tie) / 2 over every (gold, distractor) pair of one question.

    Utilities are relative to each group's success rate, so this is the comparison a policy
    update makes. Pairs from all questions are counted together (a question with more pairs
    weighs more); a question with no gold or no distractor cluster adds no pair.

    Args:
        labels: per cluster True / False / None (left out), as :func:`gold_labels` gives.
        utilities: per cluster, u_c.
        uids: per cluster, its group's uid.

    Returns:
        the AUC in [0, 1], or None when no pair exists.
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
