"""The OpenRLHF internals the adapter relies on are where its README says (an OpenRLHF upgrade
that moves one fails here, naming it)."""

from __future__ import annotations

from pathlib import Path

from tests.trainer_internals import listed_internals, moved_internals

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_openrlhf_internals_the_readme_lists_are_there(openrlhf):
    assert len(listed_internals(README)) == 5
    assert moved_internals(README, "openrlhf") == []
