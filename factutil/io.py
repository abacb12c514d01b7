"""Reading and writing the files of SPEC.md §8.

The reader checks the whole file and reports every problem, one per line, as
``FILE:LINE: field: what is wrong``; it never stops at the first one.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from factutil.schema import Group, Rollout


@dataclass(frozen=True)
class Problem:
    """One problem of an input file: where (file, 1-based line, field path) and what."""

    path: str
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.field}: {self.message}"


class InputError(ValueError):
    """A rollout file with problems; ``problems`` lists all of them, ``str()`` one per line."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(problem) for problem in problems))


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_UNION_TAGS = {"search", "assert", "answer", "invalid", "RawAction"}


def field_path(loc: Iterable[Any]) -> str:
    """A pydantic error location as a readable path: ``('actions', 2, 'search', 'query')`` ->
    ``actions[2].query`` (the discriminator tag is dropped)."""
    path = ""
    previous: Any = None
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif isinstance(previous, int) and part in _UNION_TAGS:
            pass
        else:
            path += f".{part}" if path else str(part)
        previous = part
    return path or "(line)"


def error_messages(error: ValidationError) -> list[tuple[str, str]]:
    """(field path, message) for each problem of a pydantic error.

    The message names the offending value: pydantic's own messages get ``(got VALUE)``; this
    library's validators (``value_error``) already say it, and a missing field has none.
    Shared by the file reader, the CLI and the trainer adapters so every error reads alike.
    """
    messages = []
    for item in error.errors(include_url=False):
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] not in ("missing", "value_error") and "input" in item:
            message += f" (got {_short(item['input'])})"
        messages.append((field_path(item["loc"]), message))
    return messages


def validation_problems(error: ValidationError, path: str, line: int) -> list[Problem]:
    """Turn a pydantic error into problems naming the field and the offending value."""
    return [Problem(path, line, field, message) for field, message in error_messages(error)]


def read_rollouts(path: str | os.PathLike) -> list[tuple[int, Rollout]]:
    """Read a SPEC §8 JSONL file: one rollout per non-blank line.

    Args:
        path: the file (UTF-8).

    Returns:
        (line number, Rollout) pairs in file order.

    Raises:
        InputError: listing every problem of the file (bad JSON, bad UTF-8, a field with the
            wrong type or value), each as ``FILE:LINE: field: what is wrong``.
        OSError: the file cannot be read.
    """
    name = str(path)
    problems: list[Problem] = []
    rollouts: list[tuple[int, Rollout]] = []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                problems.append(
                    Problem(name, number, "(line)", f"not valid UTF-8: byte "
                            f"0x{raw[error.start]:02x} at column {error.start + 1}")
                )
                continue
            if not text.strip():
                continue
            try:
                data = json.loads(text)
            except json.JSONDecodeError as error:
                problems.append(
                    Problem(name, number, "(line)", f"invalid JSON: {error.msg} at column {error.colno}")
                )
                continue
            except RecursionError:
                problems.append(Problem(name, number, "(line)", "invalid JSON: nested too deeply"))
                continue
            if not isinstance(data, dict):
                problems.append(
                    Problem(name, number, "(line)", f"expected a JSON object, got {type(data).__name__}")
                )
                continue
            try:
                rollouts.append((number, Rollout.model_validate(data)))
            except ValidationError as error:
                problems.extend(validation_problems(error, name, number))
    problems.extend(_group_problems(name, rollouts))
    if problems:
        raise InputError(problems)
    return rollouts


def _group_problems(name: str, rollouts: list[tuple[int, Rollout]]) -> list[Problem]:
    """Problems between lines of one uid: repeated rollout_id, differing gold or question."""
    problems = []
    first: dict[str, tuple[int, Rollout]] = {}
    ids: dict[tuple[str, str], int] = {}
    for number, rollout in rollouts:
        key = (rollout.uid, rollout.rollout_id)
        if key in ids:
            problems.append(
                Problem(name, number, "rollout_id", f"{rollout.rollout_id!r} repeats line "
                        f"{ids[key]} in uid {rollout.uid!r}")
            )
        else:
            ids[key] = number
        if rollout.uid not in first:
            first[rollout.uid] = (number, rollout)
            continue
        first_line, head = first[rollout.uid]
        for field in ("golden_answers", "question"):
            if getattr(rollout, field) != getattr(head, field):
                problems.append(
                    Problem(name, number, field, f"{_short(getattr(rollout, field))} differs from "
                            f"line {first_line} for uid {rollout.uid!r}")
                )
    return problems


def read_groups(path: str | os.PathLike) -> list[Group]:
    """Read a SPEC §8 file and gather its rollouts into groups by ``uid`` (first-appearance order).

    Raises:
        InputError: every problem of the file (see :func:`read_rollouts`).
    """
    rollouts = read_rollouts(path)
    by_uid: dict[str, list[Rollout]] = {}
    for _, rollout in rollouts:
        by_uid.setdefault(rollout.uid, []).append(rollout)
    return [Group.from_rollouts(members) for members in by_uid.values()]


def json_line(row: Any) -> str:
    """One JSON line, UTF-8 where possible; text holding lone surrogates falls back to escapes."""
    line = json.dumps(row, ensure_ascii=False, allow_nan=False)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        line = json.dumps(row, ensure_ascii=True, allow_nan=False)
    return line


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict[str, Any]]) -> None:
    """Write rows as JSONL atomically: a temporary file in the same folder, then a rename.

    A crash or an error while writing never leaves a partial output file.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", dir=target.parent, prefix=f".{target.name}.", suffix=".tmp",
        delete=False,
    ) as handle:
        try:
            for row in rows:
                handle.write(json_line(row))
                handle.write("\n")
        except BaseException:
            handle.close()
            os.unlink(handle.name)
            raise
    os.replace(handle.name, target)
