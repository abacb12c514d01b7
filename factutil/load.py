"""The input of ``compute_process_advantages`` -> validated plain rows (docs/method.md §8, §1),
validated by the models of :mod:`factutil.schema` (the one set of input rules)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from factutil.actions import AnswerAction, AssertAction, InvalidAction, SearchAction
from factutil.errors import short
from factutil.io import InputError, Problem, error_messages, group_problems, read_groups
from factutil.schema import Group, Rollout, group_key
from factutil.search_r1 import document_passage

GroupsInput = str | os.PathLike | Group | Mapping[str, Any] | Iterable[Any]


@dataclass(slots=True)
class GroupRows:
    """One validated group as plain data (docs/method.md §1, §8). ``rollouts``: per rollout in
    input order, a dict of ``uid``, ``question``, ``golden_answers``, ``rollout_id``, ``reward``
    (float or None) and ``actions`` (:func:`action_row` dicts)."""

    uid: str
    question: str
    golden_answers: list[str]
    rollouts: list[dict]
    gathered: bool = False  # loose rollouts given apart, other items between them


def load_groups(
    groups: GroupsInput, skip_invalid: bool = False
) -> tuple[list[GroupRows], dict[str, str]]:
    """Validate the input of ``compute_process_advantages`` into rows (docs/method.md §1, §8).

    Args:
        groups: a JSONL path, a :class:`Group`, a group or rollout mapping (:func:`group_key`),
            or an iterable of them; loose rollouts are grouped by ``uid``. Never mutated.
        skip_invalid: leave out a group that fails validation instead of raising.

    Returns:
        The groups in input order, and uid -> ``str(error)`` of each group left out.

    Raises:
        InputError: every problem of a failing group (or file), one ``WHERE: field: what is
            wrong`` line each (WHERE: ``FILE:LINE``, or ``groups[3] (uid 'q7', ...)``).
        ValueError: one uid names two groups.
        TypeError: an item is not a Group, Rollout or mapping.
    """
    if isinstance(groups, (str, os.PathLike)):
        return [group_rows(group) for group in read_groups(groups)], {}
    single = isinstance(groups, (Group, Mapping))  # a Group is no list: it iterates its fields
    if single:
        groups = [groups]
    elif not isinstance(groups, Iterable):
        raise TypeError(f"groups must be a JSONL path, a Group, a mapping or an iterable of them, "
                        f"got {type(groups).__name__} {short(groups)}")
    name = (lambda position: "groups") if single else (lambda position: f"groups[{position}]")
    result: list[GroupRows] = []
    skipped: dict[str, str] = {}
    seen: set[str] = set()
    for uid, item, at in _pending(groups):
        try:
            group = _group_dict(item, at, name) if item is not None else _loose_group(at, name)
            if group.uid in seen:
                raise ValueError(f"uid {group.uid!r} appears in two groups; a uid names one group")
        except (ValueError, TypeError) as error:  # InputError is a ValueError
            if not skip_invalid:
                raise
            skipped[uid] = str(error)
            continue
        seen.add(group.uid)
        result.append(group_rows(group))
        if item is None:  # loose rollouts: other items between them?
            result[-1].gathered = [p for p, _ in at] != list(range(at[0][0], at[0][0] + len(at)))
    return result, skipped


def _pending(groups: Iterable[Any]) -> list[tuple[str, Any, Any]]:
    """(key, group item, its position), or (key, None, [(position, rollout item), ...]) for the
    loose rollouts of a key, in order of first appearance."""
    pending: list[tuple[str, Any, Any]] = []
    loose: dict[str, list[tuple[int, Any]]] = {}
    for position, item in enumerate(groups):
        if isinstance(item, Group):
            pending.append((item.uid, item, position))
        elif isinstance(item, Mapping) and group_key(item) is not None:
            pending.append((str(item.get("uid", "?")), item, position))
        elif isinstance(item, (Rollout, Mapping)):
            key = str(item.uid if isinstance(item, Rollout) else item.get("uid"))
            if key not in loose:
                pending.append((key, None, loose.setdefault(key, [])))
            loose[key].append((position, item))
        else:
            raise TypeError(f"groups[{position}]: groups must hold Group, Rollout or dict items, got "
                            f"{type(item).__name__} {short(item, 40)} (a table: df.to_dict('records'))")
    return pending


def _label(name: Callable[[int], str], position: int, item: Any) -> str:
    """``name(position)`` (``groups[i]``, or ``groups`` for a single mapping) with the item's uid
    and rollout_id where they are usable strings."""
    get = item.get if isinstance(item, Mapping) else lambda key: getattr(item, key, None)
    known = [f"{key} {get(key)!r}" for key in ("uid", "rollout_id")
             if isinstance(get(key), str) and get(key)]
    return name(position) + (f" ({', '.join(known)})" if known else "")


def _problems(error: ValidationError, label: str, whole: str) -> list[Problem]:
    return [Problem(label, None, field, message) for field, message in error_messages(error, whole)]


def _group_dict(item: Any, position: int, name: Callable[[int], str]) -> Group:
    try:  # a given Group is returned as is (pydantic does not validate an instance again)
        return Group.model_validate(item)
    except ValidationError as error:
        raise InputError(_problems(error, _label(name, position, item), "(group)")) from error


def _loose_group(items: list[tuple[int, Any]], name: Callable[[int], str]) -> Group:
    """The loose rollouts of one uid as a :class:`Group`, every bad rollout reported at once;
    the problems between them are worded as the file reader's. A given Rollout is not
    validated again; its group is."""
    models: list[tuple[int, Rollout]] = []
    problems: list[Problem] = []
    first: ValidationError | None = None
    for position, item in items:
        try:
            models.append((position, Rollout.model_validate(item)))
        except ValidationError as error:
            first = first or error
            problems.extend(_problems(error, _label(name, position, item), "(rollout)"))
    if problems:
        raise InputError(problems) from first
    try:
        return Group.from_rollouts(model for _, model in models)
    except ValidationError as error:
        labels = {position: _label(name, position, model) for position, model in models}
        problems = group_problems(models, lambda n: (labels[n], None), name)
        # No conflict between the rollouts: a model changed after validation, the group's check.
        raise InputError(problems or _problems(error, labels[items[0][0]], "(group)")) from error


def group_rows(group: Group) -> GroupRows:
    """A validated :class:`Group` as :class:`GroupRows`, nothing validated again; a TypeError
    for an action that is not an action model."""
    rollouts = [rollout_row(rollout) for rollout in group.rollouts]
    return GroupRows(group.uid, group.question, list(group.golden_answers), rollouts)


def rollout_row(rollout: Rollout) -> dict[str, Any]:
    """A validated :class:`Rollout` as the rollout dict of :class:`GroupRows`."""
    return {
        "uid": rollout.uid,
        "question": rollout.question,
        "golden_answers": list(rollout.golden_answers),
        "rollout_id": rollout.rollout_id,
        "reward": rollout.reward,
        "actions": [action_row(action) for action in rollout.actions],
    }


def action_row(action: Any) -> dict[str, Any]:
    """An action model as a dict of its fields (no extra keys; a search's ``passages`` only when
    listed, as :class:`factutil.search_r1.Passage`), assert triples as ``[subject, relation,
    object]`` lists; a TypeError for anything else."""
    if type(action) not in _ACTION_MODELS and not isinstance(action, _ACTION_MODELS):
        raise TypeError(f"expected an action model, got {type(action).__name__}")
    row = dict(action.__dict__)  # the declared fields (extra keys live apart)
    if row["action"] == "assert":
        row["triples"] = [list(triple) for triple in row["triples"]]
    elif row.get("passages", ()) is None:
        del row["passages"]
    elif "passages" in row:  # listed passages (facts="retrieved")
        row["passages"] = [document_passage(item.model_dump()) for item in row["passages"]]
    return row


_ACTION_MODELS = (SearchAction, AssertAction, AnswerAction, InvalidAction)
