"""The batch as flat columns, from one pass over every action (docs/method.md §1, §2.1); every
later step of :func:`factutil.api.compute_process_advantages` works on them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from factutil.config import FactUtilConfig
from factutil.facts import Fact, distinct_facts, normalize_fact_text
from factutil.load import GroupRows
from factutil.metrics import golds_normalized_empty, outcome, qa_scores
from factutil.passages import passage_key, passage_parts, passages_of, split_passages
from factutil.shaping import KIND_CODES


@dataclass
class Prepared:
    """The batch as flat columns (docs/method.md §1, §2.1): rollouts ("rows") 0..R-1 in input
    order, effective actions in (row, step) order, triple occurrences in (row, step, position)."""

    rollout_starts: np.ndarray  # int64 (groups,): first row of each group
    lengths: np.ndarray  # int64 (R,): effective actions per rollout
    totals: np.ndarray  # int64 (R,): all actions per rollout
    kinds: np.ndarray  # int8 (N_eff,)
    occurrence_row: np.ndarray  # int64 (occurrences,)
    occurrence_step: np.ndarray  # int64 (occurrences,)
    occurrence_fact: np.ndarray  # int64 (occurrences,): batch fact index (groups' sorted texts)
    facts: list[list[Fact]]  # per group, one representative per distinct text, by text
    texts: list[list[str]]  # per group, the distinct texts, sorted
    repeated_row: list[int]
    repeated_step: list[int]
    rank: np.ndarray  # int64 (R,): position of the rollout in its group by rollout_id
    answers: list[str | None]
    empty_store_answer: list[bool]
    em: list[float]
    f1: list[float]
    reward: list[float]
    success: list[float]
    golds_normalized_empty: int  # gold answers (per group) that normalise to no token
    occurrence_triples: list[Any]  # (occurrences,): each as written ([s, r, o], the row's own list)
    ignored_kinds: list[int]  # kind code of each ignored action, in (row, step) order
    reasons: dict[int, str]  # input action index (0..N-1) -> an invalid action's reason
    observations_unsplit: int = 0  # facts="retrieved": observations taken as one passage


class RolloutColumns(NamedTuple):
    """One rollout's share of :class:`Prepared`, before its group is known."""

    kinds: list[int]  # the kind code of each effective action
    total: int  # all actions, ignored ones included
    occurrence_step: list[int]  # per asserted triple occurrence, its action's step
    occurrence_triples: list[Any]  # per occurrence, the triple as written ([s, r, o])
    repeated_steps: list[int]  # the steps of searches whose query an earlier search had
    answer: str | None
    empty_store_answer: bool  # the answer came while the store was empty
    ignored_kinds: list[int]  # the kind code of each ignored action
    reasons: dict[int, str]  # action index in the rollout -> an invalid action's reason
    unsplit: int = 0  # observations no passage layout split (facts="retrieved")


def rollout_columns(
    actions: Sequence[Mapping[str, Any]], max_turns: int, queries: dict[str, str] | None = None,
    retrieved: bool = False,
) -> RolloutColumns:
    """One rollout's columns from its validated action rows (docs/method.md §1, §5, §9).

    Effective actions: up to the answer, within ``max_turns``. A search repeats when its
    normalised query is an earlier one's. With ``retrieved`` the facts are each search's passages
    at its step. ``queries``: a memo of normalised queries shared between calls.
    """
    queries = {} if queries is None else queries
    kinds: list[int] = []
    steps: list[int] = []
    triples_written: list[Any] = []
    repeated: list[int] = []
    reasons: dict[int, str] = {}
    seen: set[str] = set()
    store_empty = True
    answer = None
    empty_store_answer = False
    unsplit = 0
    for t, action in enumerate(actions[:max_turns]):
        kind = action["action"]
        kinds.append(KIND_CODES[kind])
        facts: list[Any] = []  # what the action brings into the store
        if kind == "assert" and not retrieved:
            facts = action["triples"]
        elif kind == "search":
            if retrieved:
                given = action.get("passages")
                if given is not None:
                    passages = passages_of(given)
                else:
                    passages, cut = split_passages(action.get("observation") or "")
                    unsplit += cut
                facts = [passage_parts(passage) for passage in passages]
            query = action["query"]
            normalized = queries.get(query)
            if normalized is None:
                normalized = queries[query] = normalize_fact_text(query)
            if normalized in seen:
                repeated.append(t)
            else:
                seen.add(normalized)
        elif kind == "answer":
            answer = action["answer"]
            empty_store_answer = store_empty
            break
        elif kind == "invalid":
            reasons[t] = action["reason"]
        if facts:
            store_empty = False
            steps.extend([t] * len(facts))
            triples_written.extend(facts)
    t = len(kinds)  # the effective actions; the rest are ignored
    for u in range(t, len(actions)):
        if actions[u]["action"] == "invalid":
            reasons[u] = actions[u]["reason"]
    ignored_kinds = [KIND_CODES[action["action"]] for action in actions[t:]]
    return RolloutColumns(kinds, len(actions), steps, triples_written, repeated, answer,
                          empty_store_answer, ignored_kinds, reasons, unsplit)


def prepare(batch: list[GroupRows], config: FactUtilConfig, warn: Any) -> Prepared:
    """One pass over every rollout: outcomes, kinds, fact texts and occurrences (docs/method.md
    §1, §2.1), and what the records need (triples as written, ignored kinds, reasons)."""
    template, max_turns, fold = config.triple_template, config.max_turns, config.fold_unicode
    retrieved = config.facts == "retrieved"
    cols: list[RolloutColumns] = []  # per row
    outcomes: list[tuple[float, float, float, float]] = []  # per row: em, f1, reward, success
    occurrence_fact: list[int] = []
    rank: list[int] = []
    rollout_starts: list[int] = []
    facts_per_group: list[list[Fact]] = []
    texts_per_group: list[list[str]] = []
    queries: dict[str, str] = {}
    golds_empty = 0
    fact_count = 0
    for group in batch:
        rollouts = group.rollouts
        size = len(rollouts)
        if size == 1:
            warn(f"group {group.uid!r} has one rollout: outcome advantage 0 (no baseline)")
        if config.group_size is not None and size != config.group_size:
            warn(f"group {group.uid!r} has {size} rollouts, group_size is {config.group_size}")
        first_row = len(cols)
        rollout_starts.append(first_row)
        ids = [rollout["rollout_id"] for rollout in rollouts]
        positions = [0] * size
        for position, index in enumerate(sorted(range(size), key=ids.__getitem__)):
            positions[index] = position
        rank.extend(positions)
        golds = group.golden_answers
        for gold in golds_normalized_empty(golds, fold):
            golds_empty += 1
            warn(
                f"group {group.uid!r}: gold answer {gold!r} normalises to nothing (lower case, no "
                "punctuation, no a/an/the): no answer can match it, so it scores 0 against every "
                "answer"
            )
        scores: dict[str, tuple[float, float]] = {}
        for rollout in rollouts:
            columns = rollout_columns(rollout["actions"], max_turns, queries, retrieved)
            cols.append(columns)
            if columns.ignored_kinds:
                warn(
                    f"group {group.uid!r} rollout {rollout['rollout_id']!r}: "
                    f"{len(columns.ignored_kinds)} action(s) after the answer or beyond "
                    f"max_turns={max_turns} ignored"
                )
            answer = columns.answer
            if answer is None:
                em = f1 = 0.0
            else:
                found = scores.get(answer)
                if found is None:
                    found = scores[answer] = qa_scores(answer, golds, fold_unicode=fold)
                em, f1 = found
            reward, success = outcome(  # retrieved: the store is not the agent's, R stays
                em, f1, answered=answer is not None,
                empty_store=columns.empty_store_answer and not retrieved,
                given=rollout.get("reward"), success=config.success,
            )
            outcomes.append((em, f1, reward, success))
        parts = [triple for columns in cols[first_row:] for triple in columns.occurrence_triples]
        texts, chosen, where = distinct_facts(parts, template, fact_count,
                                              passage_key if retrieved else None)
        occurrence_fact.extend(where)
        fact_count += len(texts)
        texts_per_group.append(texts)
        facts_per_group.append([Fact._make(parts[i]) for i in chosen])
    reasons: dict[int, str] = {}
    first_action = 0  # input index of the row's first action
    for columns in cols:
        reasons.update((first_action + index, reason) for index, reason in columns.reasons.items())
        first_action += columns.total
    rows = np.arange(len(cols), dtype=np.int64)

    def flat(name: str) -> list[Any]:
        return [value for columns in cols for value in getattr(columns, name)]

    return Prepared(
        rollout_starts=np.asarray(rollout_starts, dtype=np.int64),
        lengths=np.asarray([len(columns.kinds) for columns in cols], dtype=np.int64),
        totals=np.asarray([columns.total for columns in cols], dtype=np.int64),
        kinds=np.asarray(flat("kinds"), dtype=np.int8),
        occurrence_row=np.repeat(rows, [len(columns.occurrence_step) for columns in cols]),
        occurrence_step=np.asarray(flat("occurrence_step"), dtype=np.int64),
        occurrence_fact=np.asarray(occurrence_fact, dtype=np.int64),
        facts=facts_per_group,
        texts=texts_per_group,
        repeated_row=np.repeat(rows, [len(columns.repeated_steps) for columns in cols]).tolist(),
        repeated_step=flat("repeated_steps"),
        rank=np.asarray(rank, dtype=np.int64),
        answers=[columns.answer for columns in cols],
        empty_store_answer=[columns.empty_store_answer for columns in cols],
        em=[row[0] for row in outcomes],
        f1=[row[1] for row in outcomes],
        reward=[row[2] for row in outcomes],
        success=[row[3] for row in outcomes],
        golds_normalized_empty=golds_empty,
        occurrence_triples=flat("occurrence_triples"),
        ignored_kinds=flat("ignored_kinds"),
        reasons=reasons,
        observations_unsplit=sum(columns.unsplit for columns in cols),
    )
