"""Helpers of the verl adapter tests (a uniquely named module: ``conftest`` is taken by the core).

- :func:`make_byte_tokenizer`: a byte-level tokenizer with a ChatML template built in memory (no
  download), so scripted actions round-trip exactly through encode/decode (shared with the other
  adapters' tests: ``tests/language_models.py``).
- :func:`compose_verl_config`: verl's own ``ppo_trainer.yaml`` composed with Hydra, plus overrides.
- :func:`make_agent_loop`: a registered agent loop instantiated as verl's AgentLoopWorker does.
- :func:`build_rows`: the bundled 2Wiki rollouts turned into verl V1 rows (one row per action),
  the way the ``factagent`` loop and verl's TransferQueue worker would have written them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tests.language_models import make_byte_tokenizer  # noqa: F401  (re-exported)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "examples" / "data" / "2wiki_rollouts.jsonl"
CORPUS = REPO / "examples" / "data" / "hipporag_2wikimultihopqa_corpus.json"

def compose_verl_config(*overrides: str) -> Any:
    """verl's ``ppo_trainer`` config (the installed package's YAML) with Hydra overrides."""
    import verl
    from hydra import compose, initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose("ppo_trainer", overrides=list(overrides))


def make_agent_loop(name: str, config: Any, tokenizer: Any, server: Any, **options: Any) -> Any:
    """The agent loop registered as ``name``, built exactly as verl's AgentLoopWorker builds it
    (Hydra over the registry entry plus ``options``), generating through ``server``."""
    import hydra
    from verl.experimental.agent_loop.agent_loop import (
        DictConfigWrap,
        ToolListWrap,
        _agent_loop_registry,
    )
    from verl.utils.dataset.rl_dataset import RLHFDataset

    return hydra.utils.instantiate(
        config={**_agent_loop_registry[name], **options},
        trainer_config=DictConfigWrap(config=config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type="qwen2",
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap([]),
    )


@dataclass
class Rows:
    """A verl batch in the action layout: B rows, T response positions."""

    keys: list[str]
    uids: list[str]
    extra_fields: list[dict[str, Any]]
    response_mask: torch.Tensor  # int64 (B, T)
    rm_scores: torch.Tensor  # float32 (B, T): R on the last response token of every row
    lines: list[dict[str, Any]]  # the sample's rollouts, in file order
    row_of_action: dict[tuple[str, str, int], int]  # (uid, rollout_id, step) -> row


def _action_text(action: Any) -> str:
    if action.action == "invalid":
        return action.raw
    return json.dumps(action.model_dump(exclude={"observation"}), ensure_ascii=False)


def build_rows(path: Path = SAMPLE) -> Rows:
    """The sample file as verl V1 rows, as the agent loop and TransferQueue worker write them.

    Row key ``{uid}_{session}_{step}``; ``extra_fields["factutil"]`` as the loop fills it; a
    deterministic number of response tokens per action; the trajectory's reward (our
    ``compute_score`` on its final action) on the last token of every row, as verl copies the
    final reward to every output of a trajectory.
    """
    from factutil.schema import AssertAction, Rollout

    from factutil_verl.advantage import action_fields
    from factutil_verl.prompt import add_to_store
    from factutil_verl.reward import compute_score

    lines = [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    keys: list[str] = []
    uids: list[str] = []
    extras: list[dict[str, Any]] = []
    lengths: list[int] = []
    rewards: list[float] = []
    row_of_action: dict[tuple[str, str, int], int] = {}
    template = "{subject} | {relation} | {object}"
    for line in lines:
        rollout = Rollout.model_validate(line)
        session = rollout.rollout_id.rsplit("-", 1)[1]
        store: list[Any] = []
        first_row = len(keys)
        for step, action in enumerate(rollout.actions):
            store_size = len(store)
            if isinstance(action, AssertAction):
                add_to_store(store, action.triples, template)
            row_of_action[(rollout.uid, rollout.rollout_id, step)] = len(keys)
            keys.append(f"{rollout.uid}_{session}_{step}")
            uids.append(rollout.uid)
            extras.append(
                {
                    "factutil": {
                        "trajectory_id": f"{rollout.uid}_{session}",
                        "step": step,
                        "action": action_fields(action),
                        "question": rollout.question,
                        "golden_answers": list(rollout.golden_answers),
                        "store_size": store_size,
                        "retrieval_error": None,
                    }
                }
            )
            lengths.append(3 + (len(_action_text(action)) * 7 + step) % 11)
        final = rollout.actions[-1]
        reward = compute_score(
            "2wiki",
            _action_text(final),
            {"target": rollout.golden_answers},
            extras[-1],
        )["score"]
        rewards.extend([reward] * (len(keys) - first_row))
    width = max(lengths) + 2
    mask = torch.zeros(len(keys), width, dtype=torch.int64)
    scores = torch.zeros(len(keys), width, dtype=torch.float32)
    for row, (length, reward) in enumerate(zip(lengths, rewards)):
        mask[row, :length] = 1
        scores[row, length - 1] = reward
    return Rows(keys, uids, extras, mask, scores, lines, row_of_action)
