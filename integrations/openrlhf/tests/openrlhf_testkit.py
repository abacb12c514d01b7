"""Test helpers: CPU import stand-ins for OpenRLHF's GPU-only imports, a toy tokenizer, a
scripted LLM engine and a scripted environment that replay the real 2Wiki sample.

Only tests use the stand-ins (INSTALL-NOTES.md): OpenRLHF 0.11.2 imports ``flash_attn`` and
``vllm`` at module top, and neither installs without a GPU. Everything else is OpenRLHF's code.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib.machinery
import importlib.util
import json
import re
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# Subprocesses and Ray workers import this kit with only this folder on sys.path: the shared
# test helpers live at the repository root.
_ROOT = str(Path(__file__).resolve().parents[3])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.language_models import action_text

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "examples" / "data" / "2wiki_rollouts.jsonl"


def _standin_failure(*_args: Any, **_kwargs: Any) -> Any:
    raise RuntimeError("GPU-only stand-in called in a CPU test")


class _SamplingParams:
    """Stand-in for ``vllm.SamplingParams``: keeps its keyword arguments as attributes."""

    def __init__(self, **kwargs: Any):
        self.max_tokens = None
        self.logprobs = None
        self.__dict__.update(kwargs)


STANDINS: dict[str, dict[str, Any]] = {
    "flash_attn": {},
    "flash_attn.bert_padding": {
        "index_first_axis": _standin_failure,
        "pad_input": _standin_failure,
        "rearrange": _standin_failure,
        "unpad_input": _standin_failure,
    },
    "flash_attn.utils": {},
    "flash_attn.utils.distributed": {"all_gather": _standin_failure},
    "vllm": {"SamplingParams": _SamplingParams, "__version__": "0.0.0+standin"},
    "vllm.inputs": {"TokensPrompt": dict},
    "vllm.utils": {"random_uuid": lambda: "standin-uuid"},
}


def add_standins() -> list[str]:
    """Put the stand-ins in ``sys.modules`` where the real packages are absent; returns the
    names added (each a package module with a real ``__spec__``, set on its parent too)."""
    added = []
    for root in ("flash_attn", "vllm"):
        if root in sys.modules or importlib.util.find_spec(root) is not None:
            continue
        for name, attrs in STANDINS.items():
            if name != root and not name.startswith(root + "."):
                continue
            module = types.ModuleType(name)
            module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
            module.__path__ = []
            for key, value in attrs.items():
                setattr(module, key, value)
            sys.modules[name] = module
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, module)
            added.append(name)
    return added


def remove_standins(names: list[str]) -> None:
    """Take the named stand-ins out of ``sys.modules`` again (so no later test sees them)."""
    for name in names:
        module = sys.modules.get(name)
        if module is not None and module.__spec__ is not None and module.__spec__.origin is None:
            del sys.modules[name]


@contextlib.contextmanager
def standins():
    """Stand-ins present inside the block only."""
    names = add_standins()
    try:
        yield names
    finally:
        remove_standins(names)


# ---------------------------------------------------------------------------------------------
# Toy tokenizer and scripted engine


class ToyTokenizer:
    """Whitespace-run tokenizer with a growing vocabulary; ``decode(encode(t)) == t`` exactly.

    Called like a Hugging Face tokenizer by ``MultiTurnAgentExecutor``:
    ``tok(text=..., add_special_tokens=False, return_tensors="pt")["input_ids"][0].tolist()``.
    """

    pad_token_id = 0
    _pattern = re.compile(r"\s+|\S+\s*")

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.words: list[str] = ["<pad>"]

    def encode(self, text: str) -> list[int]:
        ids = []
        for piece in self._pattern.findall(text):
            if piece not in self.vocab:
                self.vocab[piece] = len(self.words)
                self.words.append(piece)
            ids.append(self.vocab[piece])
        return ids

    def decode(self, ids: Any, skip_special_tokens: bool = False) -> str:
        return "".join(self.words[int(i)] for i in ids)

    def __call__(self, text: str, add_special_tokens: bool = False, return_tensors: str = "pt"):
        import torch

        return {"input_ids": torch.tensor([self.encode(text)], dtype=torch.long)}


class ScriptedEngine:
    """An ``llm_engine`` that emits the next scripted action text, cut at ``max_tokens`` like
    vLLM (``finish_reason="length"``). ``log`` holds ``(start, end, text)`` per call."""

    def __init__(self, texts: list[str], tokenizer: ToyTokenizer):
        self.texts = list(texts)
        self.tokenizer = tokenizer
        self.log: list[tuple[int, int, str]] = []

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        await asyncio.sleep(0)  # let concurrent episodes interleave
        text = self.texts[len(self.log)] if len(self.log) < len(self.texts) else '{"action": "answer", "answer": ""}'
        ids = self.tokenizer.encode(text)
        finish = "stop"
        budget = sampling_params.max_tokens
        if budget is not None and len(ids) > budget:
            ids, finish = ids[:budget], "length"
            text = self.tokenizer.decode(ids)
        start = len(prompt_token_ids)
        self.log.append((start, start + len(ids), text))
        output = SimpleNamespace(token_ids=list(ids), text=text, finish_reason=finish, logprobs=None)
        return SimpleNamespace(outputs=[output])


# ---------------------------------------------------------------------------------------------
# The scripted environment: replays one rollout of the sample file

SCRIPT: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("script", default=None)


def load_sample(limit_groups: int | None = None) -> list[list[dict[str, Any]]]:
    """The sample's rollouts grouped by uid (file order), each group sorted by rollout_id."""
    groups: dict[str, list[dict[str, Any]]] = {}
    with SAMPLE.open(encoding="utf-8") as handle:
        for line in handle:
            rollout = json.loads(line)
            groups.setdefault(rollout["uid"], []).append(rollout)
    ordered = [sorted(group, key=lambda r: r["rollout_id"]) for group in groups.values()]
    return ordered[:limit_groups] if limit_groups else ordered


def prompt_of(rollout: dict[str, Any]) -> str:
    return (
        "Answer with JSON actions: search, assert facts, answer.\n"
        f"Question: {rollout['question']}\n"
    )


def make_instance_cls():
    """An ``AgentInstanceBase`` subclass whose ``step`` replays the rollout in :data:`SCRIPT`."""
    import torch
    from openrlhf.utils.agent import AgentInstanceBase

    from factutil.metrics import qa_scores
    from factutil.parse import parse_action

    class ReplayInstance(AgentInstanceBase):
        def __init__(self, *args, **kwargs):
            self.turn = 0

        async def reset(self, states: dict, **kwargs):
            return {"observation": states["observation"]}

        async def step(self, state_dict: dict, **kwargs):
            script = SCRIPT.get()
            items = script["actions"]
            item = items[self.turn] if self.turn < len(items) else {}
            self.turn += 1
            action = parse_action(state_dict["action_text"])
            feedback, done, reward = "", False, 0.0
            if action.action == "answer":
                done = True
                reward = qa_scores(action.answer, script["golden_answers"])[1]
            elif item.get("observation"):
                feedback = f"\n<observation>{item['observation']}</observation>\n"
            elif action.action == "assert":
                feedback = "\n<store>" + "; ".join(" | ".join(t.as_list()) for t in action.triples) + "</store>\n"
            else:
                feedback = "\n"
            if self.turn >= len(items):
                done = True
            return {
                "rewards": torch.tensor(reward),
                "scores": torch.tensor(reward),
                "environment_feedback": feedback,
                "done": done,
                "sampling_params": state_dict.get("sampling_params"),
                "extra_logs": {"turns": float(self.turn)},
            }

    return ReplayInstance


async def run_episode(executor, rollout, tokenizer, max_length, sampling_params=None):
    """Run one scripted episode through ``executor.execute``; returns (response, engine)."""
    SCRIPT.set(rollout)
    engine = ScriptedEngine([action_text(item) for item in rollout["actions"]], tokenizer)
    params = sampling_params or _SamplingParams(max_tokens=None, logprobs=None)
    response = await executor.execute(
        prompt=prompt_of(rollout),
        label=json.dumps(rollout["golden_answers"], ensure_ascii=False),
        sampling_params=params,
        max_length=max_length,
        hf_tokenizer=tokenizer,
        llm_engine=engine,
    )
    return response, engine


def run_groups(executor, groups, tokenizer, max_length):
    """All episodes, each group's through one ``asyncio.gather`` as OpenRLHF does."""

    async def main():
        out = []
        for group in groups:
            out.extend(
                await asyncio.gather(
                    *(run_episode(executor, rollout, tokenizer, max_length) for rollout in group)
                )
            )
        return out

    return asyncio.run(main())


def make_args(estimator: str = "group_norm", n: int = 6, micro_batch_size: int = 4, **train):
    """The ``args`` namespace that ``RemoteExperienceMaker`` reads (OpenRLHF 0.11.2 names)."""
    return SimpleNamespace(
        algo=SimpleNamespace(
            advantage=SimpleNamespace(estimator=estimator, gamma=1.0, lambd=0.95, no_std_norm=False),
            kl=SimpleNamespace(use_loss=False),
        ),
        rollout=SimpleNamespace(
            n_samples_per_prompt=n,
            micro_batch_size=micro_batch_size,
            max_tokens_per_gpu=train.pop("max_tokens_per_gpu", 4096),
            max_new_tokens=None,
        ),
        reward=SimpleNamespace(clip_range=(-10.0, 10.0), overlong_buffer_len=None, stop_properly_penalty_coef=None),
        train=SimpleNamespace(dynamic_batch_enable=train.pop("dynamic_batch_enable", False)),
        actor=SimpleNamespace(num_nodes=1, num_gpus_per_node=1),
        ds=SimpleNamespace(ring_attn_size=1, tensor_parallel_size=1),
        data=SimpleNamespace(max_len=None),
    )
