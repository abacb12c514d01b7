"""The outcome reward for verl: ``compute_score`` (docs/method.md §1 outcome reward, §4 empty-store rule).

Point verl at it with ``reward.custom_reward_function.path=pkg://factutil_verl.reward`` (the
function name defaults to ``compute_score``). verl's reward manager scores the *last* row of a
trajectory: for the ``factagent`` loop that is the final action, whose ``extra_fields`` (merged
into ``extra_info`` by verl) carry the fact-store size, so the empty-store rule applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from factutil.metrics import golden_answers_from, outcome_reward
from factutil.parse import parse_action
from factutil.schema import AnswerAction

SCORE_KEYS = ("score", "em", "f1", "format_ok", "empty_store")
"""Keys of every :func:`compute_score` result (verl stacks them across samples)."""


golden_answers_of = golden_answers_from
"""Gold answers from a verl ``reward_model.ground_truth`` value: the core's
:func:`factutil.metrics.golden_answers_from` (a string, a list/array, or a mapping with
``golden_answers``, ``answers``, ``target`` (Search-R1) or ``answer``)."""


def _store_size(extra_info: Mapping[str, Any] | None) -> int | None:
    if not isinstance(extra_info, Mapping):
        return None
    info = extra_info.get("factutil")
    if isinstance(info, Mapping) and isinstance(info.get("store_size"), int):
        return int(info["store_size"])
    return None


def compute_score(
    data_source: str | None,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    fold_unicode: bool = False,
    **kwargs: Any,
) -> dict[str, float]:
    """Answer F1 (docs/method.md §1) of the final action, zeroed for an answer from an empty store (docs/method.md §4).

    Args:
        data_source: verl's data source name (unused: every source is scored the same way).
        solution_str: the decoded response of the trajectory's last row; parsed with
            :func:`factutil.parse.parse_action` (the last valid answer wins).
        ground_truth: see :func:`golden_answers_of`.
        extra_info: verl's ``extra_info`` with the agent loop's ``extra_fields`` merged in;
            ``extra_info["factutil"]["store_size"]`` is the store size before the final action.
            Without it the empty-store rule cannot apply (the answer is scored as given).
        fold_unicode: also fold Unicode dashes and quotes (``FactUtilConfig.fold_unicode``); pass
            it with ``reward.custom_reward_function.reward_kwargs.fold_unicode=true``.
        **kwargs: other keywords verl passes (ignored).

    Returns:
        ``{"score", "em", "f1", "format_ok", "empty_store"}``, all floats in [0, 1], the same keys
        for every sample. ``score`` is the F1 used as the outcome reward R; ``em``/``f1`` score the
        answer as given (0 without an answer); ``format_ok`` is 1 when the response is a valid
        answer action; ``empty_store`` is 1 when it answered from an empty store.

    Raises:
        ValueError: ``ground_truth`` holds no gold answer (a data error, never silently 0).
    """
    golden = golden_answers_of(ground_truth)
    if not golden:
        raise ValueError(f"ground_truth holds no gold answer: {ground_truth!r}")
    action = parse_action(solution_str if isinstance(solution_str, str) else str(solution_str))
    if not isinstance(action, AnswerAction):
        return {"score": 0.0, "em": 0.0, "f1": 0.0, "format_ok": 0.0, "empty_store": 0.0}
    outcome = outcome_reward(action.answer, golden, _store_size(extra_info), fold_unicode)
    return {
        "score": outcome.score,
        "em": outcome.em,
        "f1": outcome.f1,
        "format_ok": 1.0,
        "empty_store": 1.0 if outcome.empty_store else 0.0,
    }
