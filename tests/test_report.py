"""The HTML credit report (factutil.report) and what it reads from the core.

Numbers are checked against the hand-computed worked example (tests/test_worked_example.py):
its constants are imported, never the report's own output.
"""

from __future__ import annotations

import numpy as np
import pytest

from factutil import FactUtilConfig, compute_process_advantages
from tests.test_worked_example import T1, T3, T4, WORKED

WORKED_CONFIG = FactUtilConfig(mode="exact")


@pytest.fixture(scope="module")
def worked():
    return compute_process_advantages(WORKED, WORKED_CONFIG)


def test_potential_column_is_phi_of_the_store_after_each_action(worked):
    # r1: Phi jumps to tanh(5/12) at its first assert; the re-assert of the same fact adds nothing.
    # r2 never stores a fact; r3 stores two clusters of -1/12 each at once; q2 one of -1/4.
    by_hand = [0.0, T1, T1, T1, T1, 0.0, 0.0, 0.0, T3, T3, 0.0, T4, T4]
    np.testing.assert_allclose(worked.action_columns["potential"], by_hand, rtol=0, atol=1e-12)
    assert worked.per_rollout("potential")[("q1", "r3")].tolist() == pytest.approx([0.0, T3, T3])


def test_result_exposes_its_config_and_input_groups(worked):
    assert worked.config is WORKED_CONFIG
    assert [group.uid for group in worked.groups] == ["q1", "q2"]
    assert worked.groups[0].golden_answers == ["Paris"]
    invalid = worked.groups[0].rollouts[1]["actions"][0]
    assert invalid["action"] == "invalid" and invalid["reason"]
