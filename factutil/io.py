"""Reading and writing the files of docs/method.md §8; the reader reports every problem of a
file, one ``FILE:LINE: field: what is wrong`` line each."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from factutil import errors
from factutil.errors import short
from factutil.schema import Group, Rollout, group_conflicts, group_key, group_rollouts


@dataclass(frozen=True)
class Problem:
    """One problem of the input: ``path`` and 1-based ``line`` of a file, or (``line`` None) the
    item's position in the argument, e.g. ``groups[3] (uid 'q7', rollout_id 'q7-2')``."""

    path: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.field}: {self.message}"


class InputError(ValueError):
    """Input with ``problems``, ``str()`` one per line; raised from the ``ValidationError`` it
    rewords, if any."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(problem) for problem in problems))


def error_messages(error: ValidationError, whole: str = "(line)") -> list[tuple[str, str]]:
    """(field path, message) per problem of an input model's error
    (:func:`factutil.errors.error_messages`)."""
    known = tuple(Group.model_fields) if error.title == "Group" else ()  # refuses unknown keys
    return errors.error_messages(error, whole, known)


def read_rollouts(
    path: str | os.PathLike, progress: Callable[[int], None] | None = None
) -> list[tuple[int, Rollout]]:
    """(line number, Rollout) of each non-blank line of a docs/method.md §8 JSONL file;
    ``progress`` gets the bytes read, about every MiB. An OSError when it cannot be read.

    Raises:
        InputError: every problem of the file, each as ``FILE:LINE: field: what is wrong``.
    """
    name = str(path)
    problems: list[Problem] = []
    rollouts: list[tuple[int, Rollout]] = []
    unreported = 0
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if progress is not None:
                unreported += len(raw)
                if unreported >= 1 << 20:
                    progress(unreported)
                    unreported = 0
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                problems.append(Problem(name, number, "(line)", f"not valid UTF-8: byte "
                                        f"0x{raw[error.start]:02x} at column {error.start + 1}"))
                continue
            if not text.strip():
                continue
            try:
                data = json.loads(text)
            except json.JSONDecodeError as error:
                # Some decoder messages end in "at" ("Unterminated string starting at").
                problems.append(Problem(name, number, "(line)", f"invalid JSON: "
                                        f"{error.msg.removesuffix(' at')} at column {error.colno}"))
                continue
            except RecursionError:
                problems.append(Problem(name, number, "(line)", "invalid JSON: nested too deeply"))
                continue
            except ValueError as error:  # an integer past Python's 4,300-digit conversion limit
                problems.append(Problem(name, number, "(line)", f"invalid JSON: {str(error)[:90]}"))
                continue
            if not isinstance(data, dict):
                problems.append(Problem(name, number, "(line)",
                                        f"expected a JSON object, got {type(data).__name__}"))
                continue
            key = group_key(data)
            if key is not None:
                problems.append(Problem(name, number, key, (
                    f"a group dict (key {key!r}); a file holds one rollout per line (docs/method.md "
                    f"§8), group dicts are Python input")))
                continue
            try:
                rollouts.append((number, Rollout.model_validate(data)))
            except ValidationError as error:
                problems.extend(Problem(name, number, field, message)
                                for field, message in error_messages(error))
    if progress is not None and unreported:
        progress(unreported)
    if problems and problems[0].line == 1 and problems[0].field == "(line)" and not rollouts:
        document = _json_document(path)
        if document is not None:  # one line for the file, not one per line of a JSON document
            raise InputError([Problem(name, None, "(file)", (
                f"a JSON document (one {document}), not JSON Lines: expected one rollout object "
                f"per line (docs/method.md §8)"))])
    problems.extend(group_problems(rollouts, lambda n: (name, n), lambda n: f"line {n}"))
    if problems:
        raise InputError(problems)
    return rollouts


def _json_document(path: str | os.PathLike) -> str | None:
    """``"object"`` or ``"array"`` when the whole file is one JSON document, else None."""
    try:
        with open(path, encoding="utf-8") as handle:
            value = json.load(handle)
    except (ValueError, RecursionError):  # not one document (or not UTF-8): the lines' problems stand
        return None
    return {dict: "object", list: "array"}.get(type(value))


def group_problems(
    rollouts: list[tuple[int, Rollout]],
    at: Callable[[int], tuple[str, int | None]],
    name: Callable[[int], str],
) -> list[Problem]:
    """Problems between rollouts (:func:`group_conflicts`) numbered by line or position:
    ``at(number)`` gives ``(Problem.path, Problem.line)``, ``name(number)`` their words."""
    numbers = [number for number, _ in rollouts]
    models = [rollout for _, rollout in rollouts]
    problems = []
    for index, field, other in group_conflicts(models):
        rollout, number = models[index], numbers[index]
        if field == "rollout_id":
            problems.append(Problem(*at(number), field, f"{rollout.rollout_id!r} repeats "
                                    f"{name(numbers[other])} in uid {rollout.uid!r}"))
        else:
            problems.append(Problem(*at(number), field, f"{short(getattr(rollout, field))} differs "
                                    f"from {name(numbers[other])} for uid {rollout.uid!r}"))
    return problems


def read_groups(
    path: str | os.PathLike, progress: Callable[[int], None] | None = None
) -> list[Group]:
    """Read a docs/method.md §8 file into groups by ``uid``, in first-appearance order
    (InputError, OSError: as :func:`read_rollouts`)."""
    return group_rollouts(rollout for _, rollout in read_rollouts(path, progress))


def json_line(row: Any) -> str:
    """One JSON line, UTF-8 where possible; text holding lone surrogates falls back to escapes."""
    line = json.dumps(row, ensure_ascii=False, allow_nan=False)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        line = json.dumps(row, ensure_ascii=True, allow_nan=False)
    return line


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict[str, Any]]) -> None:
    """Write rows as JSONL, atomically (:func:`write_atomic`)."""
    write_atomic(path, (json_line(row) + "\n" for row in rows))


def write_atomic(path: str | os.PathLike, chunks: Iterable[str]) -> None:
    """Write text (UTF-8) atomically: a temporary file in the same folder, then a rename, so a
    crash never leaves a partial file; it gets a new file's mode (0666 less the umask). An
    OSError when the folder does not exist (never created here) or cannot be written."""
    target = Path(path)
    for attempt in range(100):
        temporary = target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            # os.open applies the umask to 0o666, as open(path, "w") would.
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:
            if attempt == 99:
                raise
    try:
        with open(descriptor, "w", encoding="utf-8") as handle:
            handle.writelines(chunks)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
