"""The input of ``compute_process_advantages`` -> validated plain rows (docs/method.md §8, §1).

:func:`load_groups` accepts a path, a :class:`Group`, a mapping, or an iterable of Groups /
Rollouts / group dicts / rollout dicts, validates them exactly as the pydantic models of
:mod:`factutil.schema` do (rejecting what they reject, with their exception), and returns plain
dicts instead of model objects.

Two tiers. The fast one is a strict ``pydantic.TypeAdapter`` over TypedDicts whose every check
runs in Rust; it accepts only the plain form of docs/method.md §8 (structured actions, list triples,
plain ``str`` and ``float`` values), for which it means exactly what :class:`Rollout` means. Any
row it rejects goes through ``Rollout.model_validate``, which raises the real error or returns the
coerced model (raw actions parsed, a blank assert made invalid, the ``facts`` alias, bytes decoded,
...) that is then converted. Whenever a group fails a check, the reference path validates that
group again and raises its exception, so messages never drift from the models.

One difference is left on purpose: a ``str`` subclass (numpy.str_, a str Enum) is read by its
characters here, while the model calls its own ``strip()`` to find a blank query or triple part;
only a subclass that overrides ``strip()`` can tell the two apart, and checking every string's
type in Python would cost a quarter of the loader's time.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError
from typing_extensions import NotRequired, TypedDict

from factutil.io import InputError, Problem, error_messages, group_problems, read_groups
from factutil.schema import (
    AnswerAction,
    AssertAction,
    Group,
    InvalidAction,
    Rollout,
    SearchAction,
    fill_group_fields,
    group_conflicts,
)

GroupsInput = str | os.PathLike | Group | Mapping[str, Any] | Iterable[Any]

# --- the fast tier: strict TypedDicts, Rust-level checks only --------------------------------

# "Not blank" as schema.py means it (``not value.strip()``). str.isspace also counts U+001C..U+001F
# as space, Rust's \s does not: without them a string of those would pass here and fail there.
_Text = Annotated[str, StringConstraints(pattern=r"[^\s\x1c-\x1f]")]
_Id = Annotated[str, StringConstraints(min_length=1)]
_Parts = Annotated[list[_Text], Field(min_length=3, max_length=3)]

# Unknown keys of actions are kept, as the models keep them; so are a rollout's, which Rollout
# merges into its metadata: that merge fails only for a metadata that is not a dict, which fails
# here too. extra="allow" also refuses a key that is not a string, as the models do ("ignore",
# though faster, would accept it).
_OPEN = ConfigDict(strict=True, extra="allow")
_CLOSED = ConfigDict(strict=True, extra="forbid")


class _Search(TypedDict):
    __pydantic_config__ = _OPEN  # type: ignore[misc]

    action: Literal["search"]
    query: _Text
    observation: NotRequired[str | None]


class _Assert(TypedDict):
    __pydantic_config__ = _OPEN  # type: ignore[misc]

    action: Literal["assert"]
    triples: Annotated[list[_Parts], Field(min_length=1)]


class _Answer(TypedDict):
    __pydantic_config__ = _OPEN  # type: ignore[misc]

    action: Literal["answer"]
    answer: str


class _Invalid(TypedDict):
    __pydantic_config__ = _OPEN  # type: ignore[misc]

    action: Literal["invalid"]
    raw: str
    reason: str
    observation: NotRequired[str | None]


class _Rollout(TypedDict):
    __pydantic_config__ = _OPEN  # type: ignore[misc]

    uid: _Id
    question: str
    golden_answers: Annotated[list[_Text], Field(min_length=1)]
    rollout_id: _Id
    actions: list[Annotated[_Search | _Assert | _Answer | _Invalid, Field(discriminator="action")]]
    reward: NotRequired[Any]  # checked in Python, as Rollout's own validator does
    metadata: NotRequired[dict[str, Any]]


class _GroupHead(TypedDict):
    __pydantic_config__ = _CLOSED  # type: ignore[misc]

    uid: _Id
    question: str
    golden_answers: Annotated[list[_Text], Field(min_length=1)]


# The validators themselves: TypeAdapter.validate_python's wrapper costs ~10% at this size.
_validate_rollout = TypeAdapter(_Rollout).validator.validate_python
_validate_head = TypeAdapter(_GroupHead).validator.validate_python


@dataclass(slots=True)
class GroupRows:
    """One validated group as plain data (docs/method.md §1, §8).

    Attributes:
        uid: the group's uid (non-empty).
        question: the question every rollout shares.
        golden_answers: the gold answers (at least one, none blank).
        rollouts: one dict per rollout, in input order: ``uid``, ``question``, ``golden_answers``,
            ``rollout_id`` (str), ``reward`` (finite float or None) and ``actions``, a list of
            dicts keyed by ``action``: ``"search"`` with ``query`` (and maybe ``observation``),
            ``"assert"`` with ``triples`` (lists of 3 non-blank str: subject, relation, object),
            ``"answer"`` with ``answer``, ``"invalid"`` with ``raw`` and ``reason``. Other keys
            may be present; they mean nothing.
    """

    uid: str
    question: str
    golden_answers: list[str]
    rollouts: list[dict]


def load_groups(
    groups: GroupsInput, skip_invalid: bool = False
) -> tuple[list[GroupRows], dict[str, str]]:
    """Validate the input of ``compute_process_advantages`` into plain rows (docs/method.md §8, §1).

    Args:
        groups: a JSONL path (docs/method.md §8), a :class:`Group`, a group or rollout mapping, or an
            iterable of Groups, Rollouts, group dicts (``rollouts`` key) and rollout dicts;
            loose rollouts are gathered by ``uid`` in order of first appearance. Never mutated.
        skip_invalid: leave out a group that fails validation instead of raising.

    Returns:
        The groups in input order, and uid -> ``str(error)`` of each group left out (empty
        unless ``skip_invalid``).

    Raises:
        InputError: a rollout or group breaks the data model (schema.py), or a file has
            problems; one line per problem, ``WHERE: field: what is wrong``, where WHERE is
            ``FILE:LINE`` for a file and the item's position for dicts and models, e.g.
            ``groups[3] (uid 'q7', rollout_id 'q7-2'): actions[0].query: Field required``
            (every problem of a failing group; ``__cause__`` is the models' ValidationError).
        ValueError: one uid names two groups.
        TypeError: an item is not a Group, Rollout or mapping.
    """
    if isinstance(groups, (str, os.PathLike)):
        return [group_rows(group) for group in read_groups(groups)], {}
    if isinstance(groups, Group):
        return [group_rows(groups)], {}
    single = isinstance(groups, Mapping)
    if single:
        groups = [groups]
    pending, loose, loose_at = _pending(groups)
    result: list[GroupRows] = []
    skipped: dict[str, str] = {}
    seen: set[str] = set()
    for uid, item, position in pending:
        try:
            try:
                group = _load_group(item, loose.get(uid))
            except ValidationError as error:
                where = _Where(single, position, loose_at.get(uid))
                raise _input_error(error, item, loose.get(uid), where) from error
            if group.uid in seen:
                raise ValueError(f"uid {group.uid!r} appears in two groups; a uid names one group")
        except (ValueError, TypeError) as error:  # InputError is a ValueError
            if not skip_invalid:
                raise
            skipped[uid] = str(error)
            continue
        seen.add(group.uid)
        result.append(group)
    return result, skipped


def _pending(
    groups: Iterable[Any],
) -> tuple[list[tuple[str, Any, int | None]], dict[str, list[Any]], dict[str, list[int]]]:
    """Sort the items into groups: (key, group item or None for loose rollouts, the group
    item's position) in order of first appearance, and per key the loose rollouts and their
    positions in ``groups``."""
    pending: list[tuple[str, Any, int | None]] = []
    loose: dict[str, list[Any]] = {}
    loose_at: dict[str, list[int]] = {}
    for position, item in enumerate(groups):
        if type(item) is dict and "rollouts" not in item:
            key = str(item.get("uid"))  # a rollout dict, the common case, before the ABC checks
        elif isinstance(item, Group):
            pending.append((item.uid, item, position))
            continue
        elif isinstance(item, Mapping) and "rollouts" in item:
            pending.append((str(item.get("uid", "?")), item, position))
            continue
        elif isinstance(item, (Rollout, Mapping)):
            key = str(item.uid if isinstance(item, Rollout) else item.get("uid"))
        else:
            raise TypeError(
                f"groups must hold Group, Rollout or dict items, got {type(item).__name__}"
            )
        members = loose.get(key)
        if members is None:
            pending.append((key, None, None))
            loose[key] = [item]
            loose_at[key] = [position]
        else:
            members.append(item)
            loose_at[key].append(position)
    return pending, loose, loose_at


@dataclass(slots=True)
class _Where:
    """How error messages name the items of ``groups``: ``groups`` itself for a single mapping,
    else ``groups[i]`` (``position`` for a group item, ``positions`` for loose rollouts)."""

    single: bool
    position: int | None
    positions: list[int] | None

    def name(self, position: int | None) -> str:
        return "groups" if self.single else f"groups[{position}]"

    def label(self, position: int | None, item: Any) -> str:
        """``groups[i]`` with the item's uid and rollout_id where they are usable strings."""
        get = item.get if isinstance(item, Mapping) else lambda key: getattr(item, key, None)
        known = [f"{key} {get(key)!r}" for key in ("uid", "rollout_id")
                 if isinstance(get(key), str) and get(key)]
        return self.name(position) + (f" ({', '.join(known)})" if known else "")


def _input_error(
    error: ValidationError, item: Any, loose: list[Any] | None, where: _Where
) -> InputError:
    """The models' error for one pending group, as problems naming the item's position.

    A group item's problems are the error's own. For loose rollouts, every rollout is checked
    so that all their problems are listed at once; when each is valid alone, the problems are
    between them (repeated rollout_id, other gold or question), worded as the file reader's.
    """
    if item is not None:
        label = where.label(where.position, item)
        return InputError([Problem(label, None, field, message)
                           for field, message in error_messages(error, "(group)")])
    problems: list[Problem] = []
    models: list[tuple[int, Rollout]] = []
    for position, rollout in zip(where.positions, loose):
        if isinstance(rollout, Rollout):
            models.append((position, rollout))
            continue
        try:
            models.append((position, Rollout.model_validate(rollout)))
        except ValidationError as own:
            label = where.label(position, rollout)
            problems.extend(Problem(label, None, field, message)
                            for field, message in error_messages(own, "(rollout)"))
    if not problems:
        labels = {position: where.label(position, rollout) for position, rollout in models}
        problems = group_problems(models, lambda n: (labels[n], None), where.name)
    if not problems:  # a Rollout model changed after validation: the group's own check
        label = where.label(where.positions[0], loose[0])
        problems = [Problem(label, None, field, message)
                    for field, message in error_messages(error, "(group)")]
    return InputError(problems)


def _load_group(item: Any, loose: list[Any] | None) -> GroupRows:
    """One pending group: the fast path, else the reference path (which raises its error)."""
    if isinstance(item, Group):
        return group_rows(item)
    rows = _loose_group(loose) if item is None else _dict_group(item)
    return rows if rows is not None else group_rows(_reference_group(item, loose))


def _reference_group(item: Any, loose: list[Any] | None) -> Group:
    """The models' own validation of one pending group (raises their exact error)."""
    if item is None:
        rollouts = [r if isinstance(r, Rollout) else Rollout.model_validate(r) for r in loose]
        return Group.from_rollouts(rollouts)
    return item if isinstance(item, Group) else Group.model_validate(item)


def _loose_group(items: list[Any]) -> GroupRows | None:
    """Loose rollouts of one uid as a group, or None to take the reference path.

    A row's own ValidationError propagates: the reference path meets the same row first.
    """
    rows = []
    for item in items:
        if type(item) is not dict and isinstance(item, Rollout):
            return None  # a given model is not validated again: the reference path is cheap
        row = _fast_row(item)
        rows.append(row if row is not None else rollout_row(Rollout.model_validate(item)))
    first = rows[0]
    return _consistent(first["uid"], first["question"], first["golden_answers"], rows)


def _dict_group(item: Mapping[str, Any]) -> GroupRows | None:
    """A group dict (``rollouts`` plus optional uid, question, gold), or None to take the
    reference path: any failure there is reported for the whole group at once."""
    rollouts = item.get("rollouts")
    if not isinstance(item, dict) or not isinstance(rollouts, list) or not rollouts:
        return None
    if not all(isinstance(rollout, dict) for rollout in rollouts):
        return None
    # As Group._fill_from_rollouts: the group and its rollouts share uid, question and gold.
    item = fill_group_fields(item)
    rollouts = item["rollouts"]
    head = {key: value for key, value in item.items() if key != "rollouts"}
    try:
        head = _validate_head(head)
    except ValidationError:
        return None
    rows = []
    for rollout in rollouts:
        row = _fast_row(rollout)
        if row is None:
            try:
                row = rollout_row(Rollout.model_validate(rollout))
            except (ValueError, TypeError):  # Group.model_validate reports the whole group
                return None
        rows.append(row)
    return _consistent(head["uid"], head["question"], head["golden_answers"], rows)


def _fast_row(item: Any) -> dict[str, Any] | None:
    """The validated copy of a plain rollout dict, or None when the fast tier cannot tell."""
    try:
        row = _validate_rollout(item)
    except ValidationError:
        return None
    reward = row.get("reward")
    if reward is not None:
        # Rollout._reward_is_number, step for step; any refusal is the model's to word.
        if isinstance(reward, bool) or not isinstance(reward, (int, float)):
            return None
        try:
            reward = float(reward)
        except OverflowError:
            return None
        if not math.isfinite(reward):
            return None
    row["reward"] = reward
    return row


def _consistent(
    uid: str, question: str, golden_answers: list[str], rows: list[dict[str, Any]]
) -> GroupRows | None:
    """The group, or None when Group._consistent would reject it (its message is the model's)."""
    head = {"uid": uid, "question": question, "golden_answers": golden_answers}
    if group_conflicts(rows, head):
        return None
    return GroupRows(uid, question, list(golden_answers), rows)


# --- models -> rows ---------------------------------------------------------------------------


def group_rows(group: Group) -> GroupRows:
    """A validated :class:`Group` (docs/method.md §1) as :class:`GroupRows`: attributes read, nothing
    dumped, nothing validated again.

    Raises:
        TypeError: an action is not an action model (see :func:`action_row`).
    """
    return GroupRows(
        group.uid, group.question, list(group.golden_answers),
        [rollout_row(rollout) for rollout in group.rollouts],
    )


def rollout_row(rollout: Rollout) -> dict[str, Any]:
    """A validated :class:`Rollout` (docs/method.md §8) as the rollout dict of :class:`GroupRows`.

    Raises:
        TypeError: an action is not an action model (see :func:`action_row`).
    """
    return {
        "uid": rollout.uid,
        "question": rollout.question,
        "golden_answers": list(rollout.golden_answers),
        "rollout_id": rollout.rollout_id,
        "reward": rollout.reward,
        "actions": [action_row(action) for action in rollout.actions],
    }


def action_row(action: Any) -> dict[str, Any]:
    """An action model (docs/method.md §1) as the action dict of :class:`GroupRows`: assert triples become
    ``[subject, relation, object]`` lists; extra keys of the model are not carried.

    Raises:
        TypeError: ``action`` is not a search, assert, answer or invalid action model.
    """
    to_row = _ROW_OF.get(type(action))  # by exact type: isinstance on models is slow here
    if to_row is None:
        to_row = next((f for model, f in _ROW_OF.items() if isinstance(action, model)), None)
        if to_row is None:
            raise TypeError(f"expected an action model, got {type(action).__name__}")
    return to_row(action)


def _search_row(action: SearchAction) -> dict[str, Any]:
    return {"action": "search", "query": action.query, "observation": action.observation}


def _assert_row(action: AssertAction) -> dict[str, Any]:
    return {"action": "assert", "triples": [[t.subject, t.relation, t.object] for t in action.triples]}


def _answer_row(action: AnswerAction) -> dict[str, Any]:
    return {"action": "answer", "answer": action.answer}


def _invalid_row(action: InvalidAction) -> dict[str, Any]:
    return {"action": "invalid", "raw": action.raw, "reason": action.reason,
            "observation": action.observation}


_ROW_OF = {SearchAction: _search_row, AssertAction: _assert_row, AnswerAction: _answer_row,
           InvalidAction: _invalid_row}
