"""Answer metrics for the outcome reward: normalisation, EM and token F1 (docs/method.md §1).

The scores follow SQuAD v1.1 ``evaluate-v1.1.py`` and HotpotQA ``hotpot_evaluate_v1.py`` (its
yes/no/no-answer rule), which search-agent papers report with; with ``fold_unicode=False`` the
normalisation is byte for byte the reference one. The cases the references leave open (empty
prediction, token-less or blank gold, ``fold_unicode``) are docs/method.md §1, "Answer metrics".
"""

from __future__ import annotations

import json
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "GOLD_KEYS",
    "UNICODE_FOLDS",
    "Outcome",
    "exact_match",
    "f1",
    "golden_answers_from",
    "golds_normalized_empty",
    "normalize_answer",
    "outcome",
    "outcome_reward",
    "qa_scores",
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
    """Normalise an answer as SQuAD v1.1 / HotpotQA do (docs/method.md §1).

    Args:
        fold_unicode: apply NFKC and then :data:`UNICODE_FOLDS` before the SQuAD steps; when
            False the result equals SQuAD's ``normalize_answer`` for every string.

    Returns:
        Lower-cased text without ``string.punctuation`` or the articles a/an/the, tokens joined
        by single spaces; ``""`` when nothing is left.

    Raises:
        TypeError: ``text`` is not a ``str``.
    """
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
    """Exact match and token F1 of one prediction, each maximised over the gold answers.

    SQuAD v1.1 ``exact_match_score``/``f1_score``/``metric_max_over_ground_truths`` with
    HotpotQA's yes/no/no-answer rule, and the edge cases of docs/method.md §1.

    Args:
        golden_answers: one gold answer, or a non-empty iterable of ``str`` (a NumPy array too).
        fold_unicode: as :func:`normalize_answer`.

    Returns:
        ``(em, f1)``: em is 1.0 or 0.0; f1 in [0, 1]. Both are 0.0 for a prediction that
        normalises to no tokens.

    Raises:
        TypeError: ``prediction`` or a gold answer is not a ``str``, or ``golden_answers`` is
            neither a ``str`` nor an iterable of them.
        ValueError: ``golden_answers`` is empty or holds a blank (empty or whitespace-only) one.
    """
    golds = _checked_golden_answers(golden_answers)
    if not isinstance(prediction, str):
        raise TypeError(
            f"prediction must be a str, got {type(prediction).__name__}: {prediction!r}"
        )
    normalized_prediction = normalize_answer(prediction, fold_unicode)
    if not normalized_prediction:
        return 0.0, 0.0
    prediction_tokens = normalized_prediction.split()
    best_em = 0.0
    best_f1 = 0.0
    for gold in golds:
        normalized_gold = normalize_answer(gold, fold_unicode)
        if normalized_gold == normalized_prediction:
            best_em = 1.0
        best_f1 = max(best_f1, _token_f1(normalized_prediction, prediction_tokens, normalized_gold))
    return best_em, best_f1


def golds_normalized_empty(
    golden_answers: Sequence[str] | str, fold_unicode: bool = False
) -> list[str]:
    """The gold answers that normalise to no tokens ("The The", "!!!"), each once, in order.

    Such a gold scores 0 against every answer (docs/method.md §1), so callers warn about it.
    Arguments and errors as :func:`qa_scores`; returns the original gold strings.
    """
    golds = _checked_golden_answers(golden_answers)
    return list(dict.fromkeys(g for g in golds if not normalize_answer(g, fold_unicode)))


def exact_match(
    prediction: str, golden_answers: Sequence[str] | str, fold_unicode: bool = False
) -> float:
    """1.0 if the normalised prediction equals any normalised gold answer, else 0.0.

    The ``em`` of :func:`qa_scores` (docs/method.md §1); arguments and errors as there.
    """
    return qa_scores(prediction, golden_answers, fold_unicode)[0]


def f1(prediction: str, golden_answers: Sequence[str] | str, fold_unicode: bool = False) -> float:
    """Token-level F1 in [0, 1] against the best-matching gold answer (docs/method.md §1).

    The ``f1`` of :func:`qa_scores`; arguments and errors as there.
    """
    return qa_scores(prediction, golden_answers, fold_unicode)[1]


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
        candidates: list[object] = [golden_answers]
    elif isinstance(golden_answers, (bytes, bytearray, Mapping)) or not hasattr(
        golden_answers, "__iter__"
    ):
        raise TypeError(
            "golden_answers must be a str or a sequence of str, got "
            f"{type(golden_answers).__name__}: {golden_answers!r}"
        )
    else:
        candidates = list(golden_answers)
    if not candidates:
        raise ValueError(f"golden_answers must hold at least one answer, got {golden_answers!r}")
    golds: list[str] = []
    for index, gold in enumerate(candidates):
        if not isinstance(gold, str):
            raise TypeError(
                f"golden_answers[{index}] must be a str, got {type(gold).__name__}: {gold!r}"
            )
        if not gold.strip():
            raise ValueError(
                f"golden_answers[{index}] is blank (empty or whitespace-only): {gold!r}; "
                f"golden_answers={golden_answers!r}"
            )
        golds.append(gold)
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
    """A rollout's outcome reward R and success y (docs/method.md §1, §3; empty store §4).

    No answer, or an answer from an empty fact store, gives R = y = 0. Otherwise R is ``given``,
    else the answer's F1; y is its EM, its F1, or R clipped to [0, 1] (``success``, the field of
    ``FactUtilConfig``). Every surface that scores an outcome calls this one rule.

    Args:
        em, f1: the answer's scores (:func:`qa_scores`); read only when ``answered``.
        given: the input's outcome reward, or None.

    Returns:
        ``(reward, success)`` as floats.
    """
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
    """The outcome of one rollout (docs/method.md §1, §4).

    ``score`` is R in [0, 1] (F1, 0 with no answer or one from an empty store); ``em`` and ``f1``
    score the answer as given (0 with none).
    """

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
    """The outcome reward of a finished rollout (docs/method.md §1, §4); every adapter applies it.

    Args:
        answer: the rollout's answer, None when it gave none.
        store_size: triples in the store when it answered; None when unknown (then the
            empty-store rule cannot apply).

    Returns:
        :class:`Outcome`.

    Raises:
        TypeError, ValueError: as :func:`qa_scores`.
    """
    if answer is None:
        qa_scores("", golden_answers)  # the gold answers are checked whatever the rollout did
        return Outcome(0.0, 0.0, 0.0, answered=False, empty_store=False)
    em, f1 = qa_scores(answer, golden_answers, fold_unicode=fold_unicode)
    empty = store_size == 0
    score, _ = outcome(em, f1, answered=True, empty_store=empty)
    return Outcome(float(score), float(em), float(f1), answered=True, empty_store=empty)


GOLD_KEYS = ("golden_answers", "answers", "target", "answer")
"""Keys of a mapping that hold the gold answers, in the order they are looked up."""


def golden_answers_from(value: Any) -> list[str]:
    """The gold answers a trainer's per-prompt value holds: the one rule of every adapter.

    Accepted: a string (one answer, or a JSON list such as ``'["Paris", "paris"]'``); a list,
    tuple or array (nested ones flattened); a mapping with one of :data:`GOLD_KEYS`, the first
    present wins (Search-R1's ``{"target": [...]}``); a number (its text). Blank answers, None
    and booleans are dropped.

    Returns:
        list[str], empty when nothing usable was given (callers skip or raise, never score it).
    """
    if isinstance(value, Mapping):
        for key in GOLD_KEYS:
            if key in value:
                return golden_answers_from(value[key])
        return []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                decoded = json.loads(text)
            except ValueError:
                decoded = None
            if isinstance(decoded, list):
                return golden_answers_from(decoded)
        return [value] if text else []
    if hasattr(value, "tolist"):  # numpy arrays after a parquet round trip
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        answers: list[str] = []
        for item in value:
            answers.extend(golden_answers_from(item))
        return answers
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [str(value)]
    return []
