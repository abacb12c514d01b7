"""The relation lexicon (``lexicon.tsv``) and the fuzzy-match cutoffs (docs/method.md §2.4)."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from importlib import resources

# Cutoffs (rapidfuzz scores, 0..100); docs/filters.md says where each applies.
ENTITY_CUTOFF = 88.0
RELATION_TEXT_CUTOFF = 85.0
RELATION_LOOKUP_CUTOFF = 92.0


@dataclass(frozen=True, slots=True)
class Relation:
    """One lexicon entry: a relation id (Wikidata ``pid``) with its verbalisations. ``inverse``
    texts swap subject and object; ``general`` names a broader id, reached with a swap when
    ``general_inverted`` (father → child); ``dated`` relations take a date as object."""

    id: str
    pid: str
    forward: tuple[str, ...]
    inverse: tuple[str, ...] = ()
    symmetric: bool = False
    general: str | None = None
    general_inverted: bool = False
    dated: bool = False


def _phrases(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(";") if v.strip())


def _load_relations() -> tuple[Relation, ...]:
    """One relation per row; phrasings are ';'-separated and the id is a forward phrasing too."""
    text = resources.files(__package__).joinpath("lexicon.tsv").read_text(encoding="utf-8")
    return tuple(
        Relation(row["id"], row["pid"], (row["id"], *_phrases(row["forward"])),
                 _phrases(row["inverse"]), row["symmetric"] == "1", row["general"] or None,
                 row["general_inverted"] == "1", row["dated"] == "1")
        for row in csv.DictReader(io.StringIO(text), delimiter="\t")
    )


RELATIONS: tuple[Relation, ...] = _load_relations()

RELATION_BY_ID: dict[str, Relation] = {rel.id: rel for rel in RELATIONS}
