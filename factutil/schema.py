"""Data model: rollouts and groups (docs/method.md §1, §8); pydantic v2, so bad input raises a
``ValidationError`` naming field and value. The actions are :mod:`factutil.actions`'."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any

import numpy as np
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from factutil.actions import (  # noqa: F401  (the action models stay importable from here)
    Action,
    AnswerAction,
    AssertAction,
    InvalidAction,
    RawAction,
    SearchAction,
    Triple,
    assert_content_problem,
)
from factutil.config import FactUtilConfig  # noqa: F401  (importable from here)
from factutil.errors import close_match, number_value, short
from factutil.metrics import missing
from factutil.parse import parse_action
from factutil.search_r1 import split_turns


def _item_text(item: dict[str, Any]) -> str:
    """The JSON text of a structured action, for an InvalidAction's ``raw``."""
    try:
        return json.dumps(item, ensure_ascii=False, default=str)
    except (RecursionError, ValueError):  # nested too deeply (unknown keys are kept), or a cycle
        return json.dumps({"action": item.get("action"), "unshown": "nested too deeply"})


def response_actions(response: str) -> list[Any]:
    """A whole response (docs/method.md §8, §9) as its actions: each turn of
    :func:`factutil.search_r1.split_turns` parsed with the block that follows it."""
    return [parse_action(text, observation) for text, observation in split_turns(response)]


def coerce_action(item: Any) -> Any:
    """One input action item of docs/method.md §8 as a model, or as given for pydantic to judge:
    a ``raw`` item is parsed (:func:`factutil.parse.parse_action`; one turn with no observation
    given reads the retrieved block after it); an ``assert`` with no triple or an empty part, or a
    search with a blank query, is invalid."""
    if isinstance(item, dict) and item.get("action") is None and "raw" in item:  # null: a table column
        item = RawAction.model_validate(item)
    if isinstance(item, RawAction):
        turns = split_turns(item.raw) if item.observation is None else []
        return parse_action(*turns[0]) if len(turns) == 1 else parse_action(
            item.raw, observation=item.observation)
    if not isinstance(item, dict):
        return item
    if item.get("action") == "assert":
        problem = assert_content_problem(item)
        if problem is not None:
            return InvalidAction(raw=_item_text(item), reason=problem)
    query = item.get("query")
    if item.get("action") == "search" and isinstance(query, str) and not query.strip():
        # As parse_action does: a blank query is the agent's format error, not a data error.
        observation = item.get("observation")
        return InvalidAction(raw=_item_text(item), reason="search with an empty query",
                             observation=observation if isinstance(observation, str) else None)
    return item


_LISTS = ("golden_answers", "actions")  # a rollout's list fields


def _lists(value: Any) -> Any:
    """A pandas table cell's numpy arrays (of arrays or of dicts, nested) as lists."""
    if isinstance(value, np.ndarray):
        return [_lists(item) for item in value.tolist()]
    if isinstance(value, dict):
        return {key: _lists(item) for key, item in value.items()}
    return value


def _golden_not_blank(values: list[str]) -> list[str]:
    for index, value in enumerate(values):
        if not value.strip():
            raise ValueError(f"golden_answers[{index}] is empty or whitespace: {value!r}")
    return values


GoldenAnswers = Annotated[list[str], Field(min_length=1), AfterValidator(_golden_not_blank)]


class Rollout(BaseModel):
    """One rollout of a group: the input line of docs/method.md §8. ``reward`` (a finite number)
    replaces the computed answer F1 as outcome reward; unknown keys go into ``metadata``."""

    model_config = ConfigDict(extra="forbid")

    uid: str = Field(min_length=1)
    question: str
    golden_answers: GoldenAnswers
    rollout_id: str = Field(min_length=1)
    actions: list[Action]
    reward: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _collect_metadata(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if any(isinstance(data.get(key), np.ndarray) for key in _LISTS):  # a pandas table's row
            data = {key: _lists(value) if key in _LISTS else value for key, value in data.items()}
        if "response" in data and missing(data["response"]) != missing(data.get("actions", "")):
            data = {k: v for k, v in data.items() if not missing(v) or k not in ("response", "actions")}
        if "response" in data:  # the whole response: its turns are the actions
            data = dict(data)
            response = data.pop("response")
            if "actions" in data:
                raise ValueError("give either actions or response, not both")
            if not isinstance(response, str):
                raise ValueError(f"response must be a string, got {short(response, 80)}")
            data["actions"] = response_actions(response)
        known = set(cls.model_fields)
        extra = {key: value for key, value in data.items() if key not in known}
        if not extra:
            return data
        kept = {key: value for key, value in data.items() if key in known}
        given = data.get("metadata", {})
        kept["metadata"] = {**given, **extra} if isinstance(given, dict) else given
        return kept

    @field_validator("actions", mode="before")
    @classmethod
    def _coerce_actions(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        first = value[0] if len(value) == 1 else None  # one raw item: the whole response
        if isinstance(first, dict) and first.get("action") is None:
            raw = first.get("raw") if first.get("observation") is None else None
            first = RawAction(raw=raw) if isinstance(raw, str) else None
        if isinstance(first, RawAction) and first.observation is None and split_turns(first.raw):
            return response_actions(first.raw)
        coerced = []
        for index, item in enumerate(value):
            try:
                coerced.append(coerce_action(item))
            except ValidationError as error:  # a bad raw item: name it actions[index].<field>
                located = [{**e, "loc": (index, *e["loc"])} for e in error.errors()]
                raise ValidationError.from_exception_data(error.title, located) from None
        return coerced

    @field_validator("reward", mode="before")
    @classmethod
    def _reward_is_number(cls, value: Any) -> Any:
        if value is None:
            return None
        number = number_value(value)
        if number is None:  # pydantic turns only ValueError into a ValidationError naming the field
            raise ValueError(f"reward must be a number or null, got {short(value, 80)}")
        if not math.isfinite(number):
            raise ValueError(f"reward must be finite, got {short(value, 80)}")
        return number


GROUP_FIELDS = ("uid", "question", "golden_answers")  # shared by a group and its rollouts


def group_key(item: Mapping[str, Any]) -> str | None:
    """The key that makes a mapping a group dict (docs/method.md §8), or None (a rollout):
    ``rollouts``, or, without ``actions`` and ``rollout_id``, a near miss of it (``rolouts``,
    which the group model then refuses by name)."""
    if "rollouts" in item:
        return "rollouts"
    if "actions" in item or "rollout_id" in item:
        return None
    return next((key for key in item
                 if key not in Rollout.model_fields and close_match(key, ("rollouts",))), None)


def fill_group_fields(data: dict[str, Any]) -> dict[str, Any]:
    """A group dict with its :data:`GROUP_FIELDS` filled in both directions (docs/method.md §8):
    the group's default to its first rollout's, a rollout mapping lacking one takes the group's
    (a given value is kept: a disagreement is the group check's). ``data`` is never changed."""
    rollouts = data.get("rollouts")
    if not isinstance(rollouts, (list, tuple)) or not rollouts:
        return data
    first = rollouts[0]
    if isinstance(first, Rollout):
        first = {key: getattr(first, key) for key in GROUP_FIELDS}
    data = dict(data)
    if isinstance(first, Mapping):
        for key in GROUP_FIELDS:
            if key not in data and key in first:
                data[key] = first[key]
    shared = {key: data[key] for key in GROUP_FIELDS if key in data}
    data["rollouts"] = [{**shared, **r} if isinstance(r, Mapping) else r for r in rollouts]
    return data


def group_conflicts(
    rollouts: Sequence[Rollout], head: Group | None = None
) -> list[tuple[int, str, int | None]]:
    """Where rollouts break the group rule (docs/method.md §1, §8): one uid's rollouts share
    ``question`` and ``golden_answers`` (those of ``head``, else of the uid's first rollout), and
    no two share a ``rollout_id``.

    Returns:
        ``(i, field, j)`` per broken rule, by rollout i, then in the order ``"uid"`` (not the
        head's; j None), ``"rollout_id"`` (repeats rollout j's), ``"golden_answers"``,
        ``"question"`` (differs from rollout j's, or the head's when j is None).
    """
    conflicts: list[tuple[int, str, int | None]] = []
    ids: dict[tuple[str, str], int] = {}
    first: dict[str, int] = {}
    for index, rollout in enumerate(rollouts):
        if head is not None and rollout.uid != head.uid:
            conflicts.append((index, "uid", None))
        other = ids.setdefault((rollout.uid, rollout.rollout_id), index)
        if other != index:
            conflicts.append((index, "rollout_id", other))
        reference = None if head is not None else first.setdefault(rollout.uid, index)
        if reference == index:  # the uid's first rollout: nothing to compare with
            continue
        ref = head if reference is None else rollouts[reference]
        if rollout.golden_answers != ref.golden_answers:
            conflicts.append((index, "golden_answers", reference))
        if rollout.question != ref.question:
            conflicts.append((index, "question", reference))
    return conflicts


class Group(BaseModel):
    """The G rollouts of one question, keyed by ``uid`` only (docs/method.md §1); a
    ``ValidationError`` when they break :func:`group_conflicts`' rule."""

    model_config = ConfigDict(extra="forbid")

    uid: str = Field(min_length=1)
    question: str
    golden_answers: GoldenAnswers
    rollouts: list[Rollout] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _fill_from_rollouts(cls, data: Any) -> Any:
        return fill_group_fields(dict(data)) if isinstance(data, Mapping) else data

    @model_validator(mode="after")
    def _consistent(self) -> Group:
        conflicts = group_conflicts(self.rollouts, self)
        if not conflicts:
            return self
        index, field, other = conflicts[0]
        rollout = self.rollouts[index]
        raise ValueError(f"rollouts[{index}]." + {
            "uid": f"uid is {rollout.uid!r}, the group's uid is {self.uid!r}",
            "rollout_id": f"rollout_id {rollout.rollout_id!r} repeats rollouts[{other}] in "
                          f"group {self.uid!r}",
            "golden_answers": f"golden_answers {rollout.golden_answers!r} differ from the "
                              f"group's {self.golden_answers!r}",
            "question": f"question {short(rollout.question, 80)} differs from the group's "
                        f"{short(self.question, 80)}",
        }[field])

    @classmethod
    def from_rollouts(cls, rollouts: Iterable[Rollout]) -> Group:
        """Build one group from rollouts that share a uid (its fields: the first rollout's)."""
        rollouts = list(rollouts)
        if not rollouts:
            raise ValueError("a group needs at least one rollout")
        return cls(rollouts=rollouts)  # fill_group_fields takes uid, question, gold from the first


def group_rollouts(rollouts: Iterable[Rollout]) -> list[Group]:
    """Gather rollouts into groups by ``uid`` (never by question), in order of first appearance."""
    by_uid: dict[str, list[Rollout]] = {}
    for rollout in rollouts:
        by_uid.setdefault(rollout.uid, []).append(rollout)
    return [Group.from_rollouts(members) for members in by_uid.values()]


def input_json_schema() -> dict[str, Any]:
    """JSON Schema of one input line (docs/method.md §8): a rollout, actions in any accepted form."""
    schema = Rollout.model_json_schema(mode="validation")
    actions = schema["properties"]["actions"]
    actions["items"] = {"anyOf": [actions["items"], {"$ref": "#/$defs/RawAction"}]}
    schema.setdefault("$defs", {})["RawAction"] = RawAction.model_json_schema()
    listed = schema["$defs"]["SearchAction"]["properties"]["passages"]["anyOf"][0]  # the array
    listed["items"] = {"anyOf": [{"type": "string"}, listed["items"]]}  # a string: text or contents
    schema["properties"]["response"] = {
        "type": "string", "description": "the whole response, instead of actions (§9)"}
    schema["required"].remove("actions")
    schema["anyOf"] = [{"required": ["actions"]}, {"required": ["response"]}]
    schema["title"] = "factutil rollout (one JSONL line)"
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema
