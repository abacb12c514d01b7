"""Triples and the four actions of the agent (docs/method.md §1, §8): the models every layer
shares (actions <- parse <- schema, no cycle); importable from :mod:`factutil.schema` too."""

from __future__ import annotations

from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from factutil.errors import short
from factutil.search_r1 import CONTENTS

TRIPLE_PARTS = ("subject", "relation", "object")


def reject_blank(value: str, field: str) -> str:
    if not value.strip():
        raise ValueError(f"{field} must not be empty or whitespace, got {value!r}")
    return value


def _triple_rules() -> type[BaseModel]:
    # The rules of a triple and the errors of one that breaks them: Triple checks valid ones
    # without building this model. Named Triple, as its errors ("... or instance of Triple").
    class Triple(BaseModel):
        """One fact ``(subject, relation, object)`` (docs/method.md §1), from a mapping or a list
        of three non-blank strings."""

        model_config = ConfigDict(frozen=True, extra="forbid", title="Triple")

        subject: str
        relation: str
        object: str

        @model_validator(mode="before")
        @classmethod
        def _from_sequence(cls, data: Any) -> Any:
            if isinstance(data, (list, tuple)):
                if len(data) != 3:
                    raise ValueError(
                        f"a triple has 3 parts (subject, relation, object), got {len(data)}: "
                        f"{short(data, 80)}"
                    )
                return dict(zip(TRIPLE_PARTS, data))
            return data

        @field_validator("subject", "relation", "object")
        @classmethod
        def _not_blank(cls, value: str, info: Any) -> str:
            return reject_blank(value, info.field_name)

    return Triple


_TripleRules = _triple_rules()


class _Parts(NamedTuple):
    subject: str
    relation: str
    object: str


class Triple(_Parts):
    """One fact ``(subject, relation, object)`` (docs/method.md §1), from a mapping or a list of
    three non-blank strings: a plain named tuple, so the input's triples cost no model object
    (a pydantic field of this type checks them; ``Triple(...)`` and :meth:`model_validate` too,
    raising pydantic's ValidationError)."""

    __slots__ = ()

    def __new__(cls, subject: str, relation: str, object: str) -> Triple:  # noqa: PYI034
        return cls.model_validate({"subject": subject, "relation": relation, "object": object})

    def as_list(self) -> list[str]:
        return [self.subject, self.relation, self.object]

    @classmethod
    def model_validate(cls, value: Any) -> Triple:
        """``value`` (a Triple, ``[s, r, o]`` or ``{"subject": s, ...}``) as a Triple."""
        if type(value) is cls:
            return value
        parts = value
        if type(value) is dict and len(value) == 3:
            parts = (value.get("subject"), value.get("relation"), value.get("object"))
        if type(parts) in (list, tuple) and len(parts) == 3:
            subject, relation, object_ = parts
            if (type(subject) is str and type(relation) is str and type(object_) is str
                    and subject.strip() and relation.strip() and object_.strip()):
                return tuple.__new__(cls, (subject, relation, object_))
        rules = _TripleRules.model_validate(value)  # raises the error that names the problem
        return tuple.__new__(cls, (rules.subject, rules.relation, rules.object))

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            cls.model_validate, json_schema_input_schema=_TripleRules.__pydantic_core_schema__,
            serialization=core_schema.plain_serializer_function_ser_schema(cls._asdict))

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        as_array = {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 3,
                    "maxItems": 3, "description": "[subject, relation, object]"}
        return {"anyOf": [as_array, handler(_TripleRules.__pydantic_core_schema__)]}


class _ActionBase(BaseModel):
    # Trainers attach their own keys to actions (scores, token counts); keep them, never fail on them.
    model_config = ConfigDict(frozen=True, extra="allow")


class PassageItem(BaseModel):
    """One passage a search lists (docs/method.md §9): ``text`` (or Search-R1's ``contents``,
    ``'"Title"\ntext'``), optional ``id`` and ``title``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str | int | None = None
    title: str | None = None
    text: str | None = None
    contents: str | None = None

    @model_validator(mode="after")
    def _has_text(self) -> PassageItem:
        if self.text is None and self.contents is None:
            raise ValueError("a passage needs a text (or contents) string")
        return self


class SearchAction(_ActionBase):
    """``search``: a retrieval query and, optionally, the retriever's observation and the passages it
    held (docs/method.md §1, §9; read only under ``facts="retrieved"``)."""

    action: Literal["search"] = "search"
    query: str
    observation: str | None = None
    passages: list[PassageItem] | None = None

    @field_validator("passages", mode="before")
    @classmethod
    def _text_passages(cls, value: Any) -> Any:
        # A listed string is a passage's text, or its Search-R1 contents ('"Title"\ntext').
        if isinstance(value, (list, tuple)):
            return [item if not isinstance(item, str) else
                    {"contents" if CONTENTS.match(item) else "text": item} for item in value]
        return value


class AssertAction(_ActionBase):
    """``assert``: triples taken from the current observation into the store (docs/method.md §1);
    at least one, named ``triples`` (file form) or ``facts`` (model output)."""

    action: Literal["assert"] = "assert"
    triples: list[Triple] = Field(
        min_length=1, validation_alias=AliasChoices("triples", "facts")
    )


class AnswerAction(_ActionBase):
    """``answer``: the final answer; ends the rollout (docs/method.md §1)."""

    action: Literal["answer"] = "answer"
    answer: str


class InvalidAction(_ActionBase):
    """An action that failed to parse: the raw text and why (docs/method.md §1). It has no effect."""

    action: Literal["invalid"] = "invalid"
    raw: str
    reason: str
    observation: str | None = None


Action = Annotated[
    SearchAction | AssertAction | AnswerAction | InvalidAction,
    Field(discriminator="action"),
]
"""A parsed action: a discriminated union on the ``action`` field."""


class RawAction(BaseModel):
    """The ``raw`` input form: model output still to be parsed (docs/method.md §8)."""

    model_config = ConfigDict(extra="allow")

    raw: str
    observation: str | None = None


def assert_content_problem(item: dict[str, Any]) -> str | None:
    """Why a structured ``assert`` is an invalid *action* (docs/method.md §1), or None: no triple
    or an empty part is the agent's format error; a wrongly typed field is left to pydantic (a
    data error)."""
    triples = item.get("triples", item.get("facts"))
    if not isinstance(triples, list):
        return None
    if not triples:
        return "assert with no triple"
    for index, triple in enumerate(triples):
        if isinstance(triple, (list, tuple)):
            if len(triple) != 3:
                return f"triple {index} has {len(triple)} parts, expected 3"
            parts = triple
        elif isinstance(triple, dict):
            parts = [triple.get(name) for name in TRIPLE_PARTS]
        else:
            return None
        for name, part in zip(TRIPLE_PARTS, parts):
            if isinstance(part, str) and not part.strip():
                return f"triple {index} has an empty {name}"
    return None
