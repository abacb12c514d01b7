"""Helpers of the TRL adapter tests (a uniquely named module: ``conftest`` is taken).

- :class:`ScriptedPolicy`: a ``generate`` for :class:`factutil_trl.FactAgentRollout` that writes
  the actions of the bundled 2Wiki sample rollouts (real texts), one script per episode.
- :func:`tiny_model`: a two-layer Llama over a tokenizer's vocabulary, built in memory from a seed.
- :func:`grpo_args`: TRL's ``GRPOConfig`` for a CPU test run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.language_models import SHORT_INSTRUCTIONS, action_text  # noqa: F401  (re-exported)

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "examples" / "data" / "2wiki_rollouts.jsonl"
QUESTIONS = REPO / "examples" / "data" / "2wiki_dev_compositional30_evidences.jsonl"

def sample_groups(groups: int, rollouts: int) -> list[dict[str, Any]]:
    """The first ``groups`` questions of the sample, each with its first ``rollouts`` rollouts:
    ``{"question", "golden_answers", "scripts": [[action text, ...], ...]}``."""
    found: dict[str, dict[str, Any]] = {}
    for line in SAMPLE.read_text(encoding="utf-8").splitlines():
        rollout = json.loads(line)
        group = found.setdefault(
            rollout["uid"],
            {
                "question": rollout["question"],
                "golden_answers": rollout["golden_answers"],
                "scripts": [],
            },
        )
        group["scripts"].append([action_text(item) for item in rollout["actions"]])
    chosen = list(found.values())[:groups]
    for group in chosen:
        group["scripts"] = group["scripts"][:rollouts]
    return chosen


class ScriptedPolicy:
    """``generate`` for :class:`factutil_trl.FactAgentRollout`: each episode writes its script.

    An episode is recognised by its context: a new one (no known context is a prefix of it)
    takes the next script of the question its prompt holds, in order; a running one continues
    the script whose last context starts its own. Each action is its text's tokens then the end
    of turn, cut at ``max_new_tokens`` as a model's would be. Past its script an episode answers
    ``"unknown"``.

    Attributes:
        emitted: per episode started, ``(question, [token ids of each action])``.
    """

    def __init__(self, tokenizer: Any, groups: list[dict[str, Any]]):
        self.tokenizer = tokenizer
        self.groups = groups
        self.emitted: list[tuple[str, list[list[int]]]] = []
        self._context: list[list[int]] = []
        self._script: list[list[str]] = []
        self._taken: dict[str, int] = {}

    def __call__(
        self, trainer: Any, contexts: list[list[int]], max_new_tokens: int
    ) -> list[list[int]]:
        out = []
        for context in contexts:
            episode = self._episode(context)
            script = self._script[episode]
            turn = len(self.emitted[episode][1])
            text = (
                script[turn] if turn < len(script) else '{"action": "answer", "answer": "unknown"}'
            )
            ids = self.tokenizer.encode(text, add_special_tokens=False) + [
                self.tokenizer.eos_token_id
            ]
            ids = ids[:max_new_tokens]
            self.emitted[episode][1].append(ids)
            self._context[episode] = context + ids
            out.append(ids)
        return out

    def _episode(self, context: list[int]) -> int:
        for episode, known in enumerate(self._context):
            if context[: len(known)] == known:
                return episode
        text = self.tokenizer.decode(context)
        group = next(g for g in self.groups if g["question"] in text)
        taken = self._taken.get(group["question"], 0)
        self._taken[group["question"]] = taken + 1
        self._script.append(group["scripts"][taken % len(group["scripts"])])
        self._context.append(list(context))
        self.emitted.append((group["question"], []))
        return len(self._script) - 1


def tiny_model(tokenizer: Any, seed: int = 0) -> Any:
    """A randomly initialised two-layer Llama with ``tokenizer``'s vocabulary (seeded)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return LlamaForCausalLM(config)


def grpo_args(output_dir: Path, **overrides: Any) -> Any:
    """``GRPOConfig`` for CPU tests: no checkpoints, no reporting, fixed seed."""
    from trl import GRPOConfig

    settings: dict[str, Any] = {
        "output_dir": str(output_dir),
        "per_device_train_batch_size": 8,
        "num_generations": 4,
        "max_steps": 2,
        "learning_rate": 1e-2,
        "logging_steps": 1,
        "report_to": "none",
        "use_cpu": True,
        "save_strategy": "no",
        "gradient_checkpointing": False,
        "max_completion_length": 4096,
        "disable_tqdm": True,
        "seed": 0,
    }
    settings.update(overrides)
    return GRPOConfig(**settings)
