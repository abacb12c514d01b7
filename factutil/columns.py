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
from factutil.passages import passage_key, passage_parts
from factutil.search_r1 import split_passages
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
    # facts="retrieved": observations taken as one passage, passages dropped as cut or empty,
    # observations held by a turn that is no search (unread)
    passages_dropped: tuple[int, int, int, int] = (0, 0, 0, 0)


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
    dropped: tuple[int, int, int, int] = (0, 0, 0, 0)  # unsplit, cut, empty, unread (retrieved)


def rollout_columns(
    actions: Sequence[Mapping[str, Any]], max_turns: int, queries: dict[str, str], retrieved: bool,
    layouts: tuple[str, ...],
) -> RolloutColumns:
    """One rollout's columns from its validated action rows (docs/method.md §1, §5, §9).

    Effective actions: up to the answer, within ``max_turns``. A search repeats when its
    normalised query is an earlier one's. With ``retrieved`` the facts are each search's passages
    at its step, split in the named ``layouts``. ``queries``: a memo of normalised queries shared
    between calls.
    """
    kinds: list[int] = []
    steps: list[int] = []
    triples_written: list[Any] = []
    repeated: list[int] = []
    reasons: dict[int, str] = {}
    seen: set[str] = set()
    store_empty = True
    answer = None
    empty_store_answer = False
    t = 0
    dropped = [0, 0, 0, 0]
    for action in actions[:max_turns]:
        kind = action["action"]
        kinds.append(KIND_CODES[kind])
        if kind == "assert":
            if not retrieved:
                store_empty = False
                triples = action["triples"]
                steps.extend([t] * len(triples))
                triples_written.extend(triples)
        elif kind == "search":
            if retrieved:
                passages = action.get("passages")
                if passages is None:
                    passages, *counts = split_passages(action.get("observation") or "", layouts)
                    dropped[:3] = [a + b for a, b in zip(dropped, counts)]
                if passages:
                    store_empty = False
                    steps.extend([t] * len(passages))
                    triples_written.extend(passage_parts(passage) for passage in passages)
            query = action["query"]
            normalized = queries.get(query)
            if normalized is None:
                normalized = queries[query] = normalize_fact_text(query)
            if normalized in seen:
                repeated.append(t)
            seen.add(normalized)
        elif kind == "answer":
            answer = action["answer"]
            empty_store_answer = store_empty
            t += 1
            break
        else:
            reasons[t] = action["reason"]
            if retrieved and action.get("observation"):  # a block after a turn that is no search
                dropped[3] += 1
        t += 1
    ignored_kinds = [KIND_CODES[action["action"]] for action in actions[t:]]
    reasons.update((u, actions[u]["reason"]) for u in range(t, len(actions))
                   if actions[u]["action"] == "invalid")
    return RolloutColumns(kinds, len(actions), steps, triples_written, repeated, answer,
                          empty_store_answer, ignored_kinds, reasons, tuple(dropped))


def one_warning(items: list[str]) -> str:
    """The one warning of a kind in a step: its first item's, and how many more."""
    return items[0] + (f" (and {len(items) - 1} more like it in this step)" if items[1:] else "")


def prepare(batch: list[GroupRows], config: FactUtilConfig, warn: Any) -> Prepared:
    """One pass over every rollout: outcomes, kinds, fact texts and occurrences (docs/method.md
    §1, §2.1), and what the records need (triples as written, ignored kinds, reasons)."""
    template, max_turns, fold = config.triple_template, config.max_turns, config.fold_unicode
    retrieved = config.facts == "retrieved"
    dropped = [0, 0, 0, 0]
    per_rollout: list[tuple] = []  # unpacked by name below
    kinds: list[int] = []
    occurrence_step: list[int] = []
    occurrence_fact: list[int] = []
    repeated_step: list[int] = []
    rank: list[int] = []
    rollout_starts: list[int] = []
    facts_per_group: list[list[Fact]] = []
    texts_per_group: list[list[str]] = []
    queries: dict[str, str] = {}
    occurrence_triples: list[list[str]] = []
    ignored_kinds: list[int] = []
    reasons: dict[int, str] = {}
    golds_empty = 0
    said: dict[str, list[str]] = {}  # kind -> the warning of each item: one warning a kind
    first_action = 0  # input index of the rollout's first action
    fact_count = 0
    row = 0
    for group in batch:
        rollouts = group.rollouts
        size = len(rollouts)
        if size == 1:
            said.setdefault("single", []).append(
                f"group {group.uid!r} has one rollout: outcome advantage 0 (no baseline)")
        if group.gathered:
            said.setdefault("gathered", []).append(
                f"group {group.uid!r} had rollouts given apart: results are group by group, not in "
                "input order; match them by rollout_keys or per_rollout()")
        if config.group_size is not None and size != config.group_size:
            said.setdefault("size", []).append(
                f"group {group.uid!r} has {size} rollouts, group_size is {config.group_size}")
        rollout_starts.append(row)
        ids = [rollout["rollout_id"] for rollout in rollouts]
        by_id = sorted(range(size), key=ids.__getitem__)
        rank.extend(sorted(range(size), key=by_id.__getitem__))  # the inverse permutation
        golds = group.golden_answers
        for gold in golds_normalized_empty(golds, fold):
            golds_empty += 1
            said.setdefault("gold", []).append(
                f"group {group.uid!r}: gold answer {gold!r} normalises to nothing (lower case, no "
                "punctuation, no a/an/the): no answer can match it, so it scores 0 against every "
                "answer"
            )
        scores: dict[str, tuple[float, float]] = {}
        first_occurrence = len(occurrence_triples)
        for rollout in rollouts:
            columns = rollout_columns(rollout["actions"], max_turns, queries, retrieved,
                                      config.layouts)
            dropped = [a + b for a, b in zip(dropped, columns.dropped)]
            kinds.extend(columns.kinds)
            occurrence_step.extend(columns.occurrence_step)
            occurrence_triples.extend(columns.occurrence_triples)
            repeated_step.extend(columns.repeated_steps)
            for index, reason in columns.reasons.items():
                reasons[first_action + index] = reason
            ignored_kinds.extend(columns.ignored_kinds)
            if columns.ignored_kinds:
                lost = columns.answer is None and KIND_CODES["answer"] in columns.ignored_kinds
                said.setdefault(f"ignored {lost}", []).append(
                    f"group {group.uid!r} rollout {rollout['rollout_id']!r}: "
                    f"{len(columns.ignored_kinds)} action(s) after the answer or beyond "
                    f"max_turns={max_turns} ignored{', its answer among them: unanswered, R = 0' if lost else ''}"
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
            per_rollout.append((answer, columns.empty_store_answer, em, f1, reward, success,
                                len(columns.kinds), columns.total, len(columns.occurrence_step),
                                len(columns.repeated_steps)))
            first_action += columns.total
            row += 1
        parts = occurrence_triples[first_occurrence:]
        texts, chosen, where = distinct_facts(parts, template, fact_count,
                                              passage_key if retrieved else None)
        occurrence_fact.extend(where)
        fact_count += len(texts)
        texts_per_group.append(texts)
        # a passage as a triple: its title, an empty relation, its text (docs/method.md §9)
        facts_per_group.append([Fact(parts[i][0], "", parts[i][2]) if retrieved else Fact._make(parts[i])
                                for i in chosen])
    for items in said.values():
        warn(one_warning(items))
    (answers, empty_store, em_list, f1_list, rewards, successes, lengths, totals, occurrences,
     repeats) = map(list, zip(*per_rollout)) if per_rollout else ([] for _ in range(10))
    return Prepared(
        rollout_starts=np.asarray(rollout_starts, dtype=np.int64),
        lengths=np.asarray(lengths, dtype=np.int64),
        totals=np.asarray(totals, dtype=np.int64),
        kinds=np.asarray(kinds, dtype=np.int8),
        occurrence_row=np.repeat(np.arange(row, dtype=np.int64), occurrences),
        occurrence_step=np.asarray(occurrence_step, dtype=np.int64),
        occurrence_fact=np.asarray(occurrence_fact, dtype=np.int64),
        facts=facts_per_group,
        texts=texts_per_group,
        repeated_row=np.repeat(np.arange(row, dtype=np.int64), repeats).tolist(),
        repeated_step=repeated_step,
        rank=np.asarray(rank, dtype=np.int64),
        answers=answers,
        empty_store_answer=empty_store,
        em=em_list,
        f1=f1_list,
        reward=rewards,
        success=successes,
        golds_normalized_empty=golds_empty,
        occurrence_triples=occurrence_triples,
        ignored_kinds=ignored_kinds,
        reasons=reasons,
        passages_dropped=tuple(dropped),
    )
