"""The trainer internals an adapter relies on, as the table of its README's section "Trainer
versions and internals" lists them, checked against the installed trainer; each adapter's tests
call :func:`moved_internals`, so an upgrade that moves one fails naming it."""

from __future__ import annotations

import importlib
import inspect
import re
from importlib import metadata
from pathlib import Path

SECTION = "## Trainer versions and internals"
ENTRY = re.compile(r"^\| `(?P<module>[\w.]+):(?P<attribute>[\w.]+)(?:\((?P<params>[^)]*)\))?`",
                   re.MULTILINE)


def listed_internals(readme: Path) -> list[tuple[str, str, list[str] | None]]:
    """``(module, attribute path, parameter names or None)`` per row of the section's table."""
    text = readme.read_text(encoding="utf-8")
    assert SECTION in text, f"{readme} has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return [(m["module"], m["attribute"],
             None if m["params"] is None else [p.strip() for p in m["params"].split(",") if p.strip()])
            for m in ENTRY.finditer(section)]


def moved_internals(readme: Path, trainer: str) -> list[str]:
    """What moved, one line per internal: missing, or called with other parameters than listed
    (names in order; ``*args`` and ``**kwargs`` as written)."""
    version = metadata.version(trainer)
    problems = []
    for module_name, attribute, params in listed_internals(readme):
        where = f"{module_name}:{attribute}"
        try:
            found = importlib.import_module(module_name)
            for name in attribute.split("."):
                found = getattr(found, name)
        except (ImportError, AttributeError, RuntimeError) as error:  # RuntimeError: a lazy module
            problems.append(f"{where} is gone in {trainer} {version} ({error})")
            continue
        if params is not None:
            given = [("*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD
                      else "") + p.name for p in inspect.signature(found).parameters.values()]
            if given != params:
                problems.append(f"{where} takes ({', '.join(given)}) in {trainer} {version}, "
                                f"the adapter calls it as ({', '.join(params)})")
    return [f"{problem}: the adapter relies on it (see {readme.name}, {SECTION[3:]!r})"
            for problem in problems]
