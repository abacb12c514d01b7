"""Reading and writing the files of docs/method.md §8; the reader reports every problem of a
file, one ``FILE:LINE: field: what is wrong`` line each."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import re
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


SHOWN = 10
"""Problems an :class:`InputError` shows; the rest are counted."""


class InputError(ValueError):
    """Input with ``problems``; ``str()`` one per line, the first :data:`SHOWN`, then how many
    more. Raised from the ``ValidationError`` it rewords, if any."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        lines = [str(problem) for problem in problems[:SHOWN]]
        if len(problems) > SHOWN:
            lines.append(f"... and {len(problems) - SHOWN} more ({len(problems)} problems in all)")
        super().__init__("\n".join(lines))


def error_messages(error: ValidationError, whole: str = "(line)") -> list[tuple[str, str]]:
    """(field path, message) per problem of an input model's error
    (:func:`factutil.errors.error_messages`)."""
    known = tuple(Group.model_fields) if error.title == "Group" else ()  # refuses unknown keys
    return errors.error_messages(error, whole, known)


_JSON_TEXT = re.compile(r"\s*(\{|\[\s*\{)")
FORMS = {b"\x1f\x8b": gzip.open, b"BZh": bz2.open, b"\xfd7zXZ\x00": lzma.open,
         b"\x28\xb5\x2f\xfd": "zstd-compressed", b"PK\x03\x04": "a zip archive"}
"""Leading bytes of the forms read as their text (gzip, bzip2, xz) or refused by name."""


def read_rollouts(
    path: str | os.PathLike, progress: Callable[[int], None] | None = None
) -> list[tuple[int, Rollout]]:
    """(line number, Rollout) of each non-blank line of a docs/method.md §8 JSONL file, read
    through gzip, bzip2 or xz when compressed; ``progress`` gets the bytes of the file read,
    about every MiB. An OSError when it cannot be read.

    Raises:
        InputError: every problem of the file, each as ``FILE:LINE: field: what is wrong``
            (``str()`` shows the first :data:`SHOWN`); a text of JSON given as the path, or a
            zstd or zip file, as one problem naming it.
    """
    name = str(path)
    if isinstance(path, str) and (len(path) > 4096 or "\n" in path or _JSON_TEXT.match(path)):
        raise InputError([Problem(short(path), None, "(path)", (
            "a text of JSON given where a file path is expected: pass the file's path, or the "
            "rollouts as dicts ([json.loads(line) for line in text.splitlines()])"))])
    problems: list[Problem] = []
    rollouts: list[tuple[int, Rollout]] = []
    with open(path, "rb") as raw:
        form = next((f for magic, f in FORMS.items() if raw.peek(8).startswith(magic)), None)
        if isinstance(form, str):
            raise InputError([Problem(name, None, "(file)", (
                f"{form}, not JSON Lines: expected one rollout object per line (docs/method.md "
                f"§8), plain or gzip/bzip2/xz-compressed"))])
        reported = 0
        for number, line in enumerate(form(raw, "rb") if form else raw, start=1):
            if progress is not None and raw.tell() - reported >= 1 << 20:
                progress(raw.tell() - reported)
                reported = raw.tell()
            found = _line(line)
            if isinstance(found, tuple):
                problems.append(Problem(name, number, *found))
            elif found is not None:
                try:
                    rollouts.append((number, Rollout.model_validate(found)))
                except ValidationError as error:
                    problems.extend(Problem(name, number, *item) for item in error_messages(error))
        if progress is not None and raw.tell() > reported:
            progress(raw.tell() - reported)
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


def _line(raw: bytes) -> tuple[str, str] | dict | None:
    """One line's object (a dict to validate), None for a blank line, or (field, what is wrong)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return "(line)", f"not valid UTF-8: byte 0x{raw[error.start]:02x} at column {error.start + 1}"
    if not text.strip():
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        # Some decoder messages end in "at" ("Unterminated string starting at").
        return "(line)", f"invalid JSON: {error.msg.removesuffix(' at')} at column {error.colno}"
    except RecursionError:
        return "(line)", "invalid JSON: nested too deeply"
    except ValueError as error:  # an integer past Python's 4,300-digit conversion limit
        return "(line)", f"invalid JSON: {str(error)[:90]}"
    if not isinstance(data, dict):
        return "(line)", f"expected a JSON object, got {type(data).__name__}"
    key = group_key(data)
    return data if key is None else (key, (
        f"a group dict (key {key!r}); a file holds one rollout per line (docs/method.md §8), "
        f"group dicts are Python input"))


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
        rollout, named = models[index], name(numbers[other])
        problems.append(Problem(*at(numbers[index]), field, (
            f"{rollout.rollout_id!r} repeats {named} in uid {rollout.uid!r}" if field == "rollout_id"
            else f"{short(getattr(rollout, field))} differs from {named} for uid {rollout.uid!r}")))
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
    temporary = target.parent / f".{target.name}.{secrets.token_hex(8)}.tmp"
    # os.open applies the umask to 0o666, as open(path, "w") would; O_EXCL: never another's file.
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with open(descriptor, "w", encoding="utf-8") as handle:
            handle.writelines(chunks)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
