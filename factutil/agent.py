"""The FactAgent's side of a rollout (docs/method.md §1): its prompt, its fact store, its outcome.

Every trainer adapter rolls the agent out the same way, so the parts they share live here:

- the prompt: question + fact store + latest search result, never the history
  (:func:`build_messages`, :data:`INSTRUCTIONS`); the messages go through the model's chat template
  in the adapter;
- the store: triples added once per normalised text (docs/method.md §2.1, :func:`add_to_store`);
- the outcome reward of a finished rollout: answer F1, 0 with no answer and 0 for an answer from
  an empty store (docs/method.md §1, §4; :func:`outcome_reward`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from factutil.cluster import triple_text
from factutil.metrics import outcome, qa_scores
from factutil.schema import Triple

INSTRUCTIONS = """\
You answer a question by acting one step at a time. You keep a fact store: the facts you have \
taken from search results. Each turn you see only the question, your fact store and the latest \
search result. Reply with exactly one action, as one JSON object:
{"action": "search", "query": "<what to look up>"}
{"action": "assert", "facts": [["<subject>", "<relation>", "<object>"], ...]}
{"action": "answer", "answer": "<short answer>"}
Use assert to copy the facts you need from the latest search result into your store before you \
search again: the next search result replaces it. Answer from the facts in your store, with as \
few words as possible."""

EMPTY_STORE = "(empty)"
NO_OBSERVATION = "(none yet)"


def add_to_store(store: list[Triple], triples: Iterable[Triple], template: str) -> int:
    """Append the triples whose normalised text (docs/method.md §2.1) is not in ``store`` yet.

    Args:
        store: the fact store, in insertion order; modified in place.
        triples: the triples of one valid ``assert``.
        template: ``FactUtilConfig.triple_template``.

    Returns:
        How many triples were added.
    """
    seen = {triple_text(triple, template) for triple in store}
    added = 0
    for triple in triples:
        text = triple_text(triple, template)
        if text not in seen:
            seen.add(text)
            store.append(triple)
            added += 1
    return added


def render_store(store: Sequence[Triple]) -> str:
    """The store as lines ``- subject | relation | object``, in insertion order; ``(empty)``."""
    if not store:
        return EMPTY_STORE
    return "\n".join(f"- {t.subject} | {t.relation} | {t.object}" for t in store)


def build_messages(
    question: str,
    store: Sequence[Triple],
    observation: str | None,
    instructions: str = INSTRUCTIONS,
) -> list[dict[str, str]]:
    """Chat messages of one turn: a system message with ``instructions`` and one user message.

    Returns:
        ``[{"role": "system", ...}, {"role": "user", "content": "Question: ...\\n\\nFact store:\\n
        ...\\n\\nLatest search result:\\n..."}]``.
    """
    user = (
        f"Question: {question}\n\n"
        f"Fact store:\n{render_store(store)}\n\n"
        f"Latest search result:\n{observation if observation else NO_OBSERVATION}"
    )
    return [{"role": "system", "content": instructions}, {"role": "user", "content": user}]


@dataclass(frozen=True)
class Outcome:
    """The outcome of one rollout (docs/method.md §1, §4).

    Attributes:
        score: the outcome reward R in [0, 1]: answer F1, or 0 with no answer or an answer
            from an empty store.
        em: exact match of the answer as given (0 with no answer).
        f1: token F1 of the answer as given (0 with no answer).
        answered: the rollout gave an answer.
        empty_store: it answered from an empty store.
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
        golden_answers: the question's gold answers (a non-empty sequence, or one string).
        store_size: triples in the store when it answered; None when unknown (the empty-store
            rule then cannot apply and the answer is scored as given).
        fold_unicode: ``FactUtilConfig.fold_unicode``.

    Returns:
        :class:`Outcome`; ``score`` is F1, 0 without an answer or from an empty store.

    Raises:
        ValueError: ``golden_answers`` is empty or holds a blank answer.
        TypeError: an answer or gold answer that is not a ``str``.
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

    verl's ``reward_model.ground_truth``, OpenRLHF's ``label``, a dataset column: a string (one
    answer, or a JSON list such as ``'["Paris", "paris"]'``); a list, tuple or array of answers
    (nested ones flattened); a mapping with one of :data:`GOLD_KEYS` (Search-R1's
    ``{"target": [...]}``), the first present wins; a number (its text). Blank answers, None and
    booleans are dropped.

    Returns:
        list[str], possibly empty when nothing usable was given (a caller skips the group or
        raises, never scores it silently).
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
