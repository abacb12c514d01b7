"""The FactAgent outcome reward as a TRL reward function (docs/method.md §1, §4)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from factutil.metrics import GOLD_KEYS, gold_key, golden_answers_from, outcome_reward

from factutil_trl.rollout import PAYLOAD_KEY


def factagent_reward(
    completions: Sequence[Any],
    factutil: Sequence[Any] | None = None,
    golden_answers: Sequence[Any] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """Answer F1 of each episode, 0 without an answer or from an empty store.

    Pass it as ``GRPOTrainer(reward_funcs=[factagent_reward], ...)``. TRL calls it with every
    dataset column and every extra key of the ``rollout_func``: ``factutil`` is the payload of
    :class:`factutil_trl.FactAgentRollout`. A row's gold answers are its first column of
    ``golden_answers``, ``answers``, ``target``, ``answer``, ``ground_truth`` that is not None
    (:func:`factutil.metrics.gold_key`, the rule of every adapter): a list of strings, one
    string, or any form :func:`factutil.metrics.golden_answers_from` reads.
    The rule is :func:`factutil.metrics.outcome_reward`, the one the other adapters apply.

    Returns:
        one float in [0, 1] per completion; None (TRL: not scored) for a completion without a
        payload, so another rollout function's completions are never scored 0 by mistake.

    Raises:
        ValueError: no gold answers column, or a row whose gold answers are empty or blank
            (the message names the column, the row and the value).
    """
    payloads = list(factutil) if factutil is not None else [None] * len(completions)
    columns = {GOLD_KEYS[0]: golden_answers, **{key: kwargs.get(key) for key in GOLD_KEYS[1:]}}
    columns = {key: value for key, value in columns.items() if value is not None}
    if not columns:
        raise ValueError(f"factagent_reward needs a gold answers dataset column, one of "
                         f"{list(GOLD_KEYS)}")
    rewards: list[float | None] = []
    for row, (payload, *values) in enumerate(zip(payloads, *columns.values(), strict=True)):
        if not isinstance(payload, Mapping):
            rewards.append(None)
            continue
        values = dict(zip(columns, values))  # the row's gold: its column of gold_key
        column = gold_key(values) or next(iter(columns))
        golds = values[column]
        answers = golden_answers_from(golds)
        try:
            outcome = outcome_reward(payload.get("answer"), answers, payload.get("store_size"))
        except (TypeError, ValueError) as error:
            raise ValueError(f"{column}[{row}]: {error} (got {golds!r})"[:300]) from error
        rewards.append(outcome.score)
    return rewards


__all__ = ["PAYLOAD_KEY", "factagent_reward"]
