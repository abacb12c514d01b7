"""Answer metrics for the outcome reward: normalisation, EM and token F1 (docs/method.md §1).

They follow SQuAD v1.1 ``evaluate-v1.1.py`` and HotpotQA ``hotpot_evaluate_v1.py``, as
search-agent papers report; docs/method.md §1 "Answer metrics" has the cases they leave open.
"""

from __future__ import annotations

import json
import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "GOLD_KEYS", "UNICODE_FOLDS", "Outcome", "gold_key", "golden_answers_from",
    "golds_normalized_empty", "normalize_answer", "outcome", "outcome_reward", "qa_scores",
]

_DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\u2e3a\u2e3b"
_SINGLE_QUOTES = "\u2018\u2019\u201a\u201b\u2032\u2035\u02bc"
_DOUBLE_QUOTES = "\u201c\u201d\u201e\u201f"

#: Characters that ``fold_unicode=True`` maps to ASCII after NFKC (docs/method.md §1).
UNICODE_FOLDS: dict[str, str] = {
    **dict.fromkeys(_DASHES, "-"),
    **dict.fromkeys(_SINGLE_QUOTES, "'"),
    **dict.fromkeys(_DOUBLE_QUOTES, '"'),
}
_FOLD_TABLE = str.maketrans(UNICODE_FOLDS)

_DROP_PUNCTUATION = str.maketrans("", "", string.punctuation)  # the same characters, in C
_ARTICLES = re.compile(r"\b(a|an|the)\b")
# HotpotQA: these answers are all-or-nothing; no partial F1 against a different answer.
_YES_NO_NOANSWER = frozenset({"yes", "no", "noanswer"})


def normalize_answer(text: str, fold_unicode: bool = False) -> str:
    """Normalise an answer as SQuAD v1.1 / HotpotQA do (docs/method.md §1); TypeError if not str.
    Lower-case, drop ``string.punctuation`` and a/an/the, join tokens by one space; without
    ``fold_unicode`` (NFKC and :data:`UNICODE_FOLDS` first) it equals SQuAD's for every string."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}: {text!r}")
    if fold_unicode:
        # NFKC first so that fullwidth and small dash/quote forms reach the fold table.
        text = unicodedata.normalize("NFKC", text).translate(_FOLD_TABLE)
    # The reference order: white_space_fix(remove_articles(remove_punc(lower(s)))).
    text = text.lower()
    text = text.translate(_DROP_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def qa_scores(
    prediction: str, golden_answers: Sequence[str] | str, fold_unicode: bool = False
) -> tuple[float, float]:
    """``(em, f1)`` of one prediction, each maximised over the gold answers (docs/method.md §1).
    SQuAD v1.1's scores with HotpotQA's yes/no/no-answer rule: em 1.0 or 0.0, f1 in [0, 1], both
    0.0 for a prediction that normalises to no tokens. ``golden_answers``: one ``str`` or a
    non-empty iterable of them. TypeError for a non-str prediction or gold answer, ValueError for
    no gold or a blank one."""
    golds = _checked_golden_answers(golden_answers)
    if not isinstance(prediction, str):
        raise TypeError(
            f"prediction must be a str, got {type(prediction).__name__}: {prediction!r}"
        )
    normalized_prediction = normalize_answer(prediction, fold_unicode)
    if not normalized_prediction:
        return 0.0, 0.0
    prediction_tokens = normalized_prediction.split()
    normalized_golds = [normalize_answer(gold, fold_unicode) for gold in golds]
    return float(normalized_prediction in normalized_golds), max(
        _token_f1(normalized_prediction, prediction_tokens, gold) for gold in normalized_golds)


def golds_normalized_empty(
    golden_answers: Sequence[str] | str, fold_unicode: bool = False
) -> list[str]:
    """The gold answers that normalise to no tokens ("The The", "!!!"), each once, in order: they
    score 0 against every answer (docs/method.md §1), so callers warn. Raises as :func:`qa_scores`.
    """
    golds = _checked_golden_answers(golden_answers)
    return list(dict.fromkeys(g for g in golds if not normalize_answer(g, fold_unicode)))


def _token_f1(
    normalized_prediction: str, prediction_tokens: list[str], normalized_gold: str
) -> float:
    if normalized_prediction != normalized_gold and (
        normalized_prediction in _YES_NO_NOANSWER or normalized_gold in _YES_NO_NOANSWER
    ):
        return 0.0
    gold_tokens = normalized_gold.split()
    num_same = sum((Counter(prediction_tokens) & Counter(gold_tokens)).values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(prediction_tokens)
    recall = num_same / len(gold_tokens)
    # Same expression as the reference, so the float is bit-identical to SQuAD's.
    return (2 * precision * recall) / (precision + recall)


def _checked_golden_answers(golden_answers: Sequence[str] | str) -> list[str]:
    if isinstance(golden_answers, str):
        golds: list[Any] = [golden_answers]
    elif isinstance(golden_answers, (bytes, bytearray, Mapping)) or not hasattr(
        golden_answers, "__iter__"
    ):
        raise TypeError(
            "golden_answers must be a str or a sequence of str, got "
            f"{type(golden_answers).__name__}: {golden_answers!r}"
        )
    else:
        golds = list(golden_answers)
    if not golds:
        raise ValueError(f"golden_answers must hold at least one answer, got {golden_answers!r}")
    for index, gold in enumerate(golds):
        if not isinstance(gold, str):
            raise TypeError(
                f"golden_answers[{index}] must be a str, got {type(gold).__name__}: {gold!r}"
            )
        if not gold.strip():
            raise ValueError(
                f"golden_answers[{index}] is blank (empty or whitespace-only): {gold!r}; "
                f"golden_answers={golden_answers!r}"
            )
    return golds


def outcome(
    em: float,
    f1: float,
    *,
    answered: bool,
    empty_store: bool,
    given: float | None = None,
    success: Literal["em", "f1", "reward"] = "em",
) -> tuple[float, float]:
    """``(R, y)``, a rollout's outcome reward and success as floats (docs/method.md §1, §3, §4),
    every surface's rule: no answer, or one from an empty store, gives 0, 0; else R is ``given``
    or the answer's ``f1``, and y its ``em``, ``f1`` or R clipped to [0, 1] (``success``)."""
    if not answered or empty_store:
        return 0.0, 0.0
    reward = given if given is not None else f1
    if success == "em":
        return reward, em
    if success == "f1":
        return reward, f1
    return reward, min(max(reward, 0.0), 1.0)


@dataclass(frozen=True)
class Outcome:
    """The outcome of one rollout (docs/method.md §1, §4): ``score`` is R in [0, 1]; ``em`` and
    ``f1`` score the answer as given (0 with none)."""

    score: float
    em: float
    f1: float
    answered: bool
    empty_store: bool


def outcome_reward(
    answer: str | None,
    golden_answers: Sequence[str] | str,
    store_size: int | None,
    fold_unicode: bool = False,
) -> Outcome:
    """The :class:`Outcome` of a finished rollout (docs/method.md §1, §4), every adapter's rule.
    ``answer``: None when it gave none; ``store_size``: triples in the store when it answered,
    None when unknown (no empty-store rule then). Raises as :func:`qa_scores`."""
    answered = answer is not None  # the gold answers are checked whatever the rollout did
    em, f1 = qa_scores(answer if answered else "", golden_answers, fold_unicode=fold_unicode)
    empty = answered and store_size == 0
    score, _ = outcome(em, f1, answered=answered, empty_store=empty)
    return Outcome(float(score), float(em), float(f1), answered=answered, empty_store=empty)


GOLD_KEYS = ("golden_answers", "answers", "target", "answer", "ground_truth")  # in this order


def gold_key(row: Mapping[str, Any]) -> str | None:
    """The first of :data:`GOLD_KEYS` whose value in ``row`` is given: not None, nor a float NaN
    (pandas' missing value). None: no such key."""
    return next((key for key in GOLD_KEYS if not missing(row.get(key))), None)


def missing(value: Any) -> bool:
    """Whether a table's cell holds no value: None, or a float NaN (pandas' missing value)."""
    return value is None or isinstance(value, float) and math.isnan(value)


def golden_answers_from(value: Any) -> list[str]:
    """The gold answers (list[str]) a trainer's per-prompt value holds: every adapter's rule.
    A string (one answer, or a JSON list ``'["Paris", "paris"]'``), a list, tuple or array
    (flattened), a mapping (its :func:`gold_key`'s value: Search-R1's ``{"ground_truth":
    {"target": [...]}}``) or a number; blanks, None, NaN and booleans are dropped. An empty result
    means nothing usable: callers skip or raise, never score it."""
    if isinstance(value, Mapping):
        return golden_answers_from(value[key]) if (key := gold_key(value)) else []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            with suppress(ValueError):
                if isinstance(decoded := json.loads(text), list):
                    return golden_answers_from(decoded)
        return [value] if text else []
    if hasattr(value, "tolist"):  # numpy arrays after a parquet round trip
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [answer for item in value for answer in golden_answers_from(item)]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not missing(value):
        return [str(value)]
    return []
