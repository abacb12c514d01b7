"""The verl internals the adapter relies on are where its README says (a verl upgrade that moves
one fails here, naming it)."""

from __future__ import annotations

from pathlib import Path

from tests.trainer_internals import listed_internals, moved_internals

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_verl_internals_the_readme_lists_are_there():
    assert len(listed_internals(README)) == 11
    assert moved_internals(README, "verl") == []
