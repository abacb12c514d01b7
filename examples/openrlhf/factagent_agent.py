"""FactAgent Search–Assert–Answer agent for OpenRLHF 0.11 (``--train.agent_func_path``).

Each model turn is one action (docs/method.md §1), read by
:class:`factutil.tools.agent.FactAgentEpisode`, the FactAgent every adapter rolls out:

    {"action": "search", "query": "..."}                    -> Search result: passages
    {"action": "assert", "facts": [["s", "r", "o"], ...]}   -> Fact store: the fact store
    {"action": "answer", "answer": "..."}                   -> done; reward = answer F1 (0 from an
                                                               empty store; 0 with no answer)

Searches go to a Search-R1 retrieval API (:class:`factutil.tools.retrieval.RetrievalClient`; the
repository's ``factutil serve``: BM25 over the bundled 2Wiki corpus). OpenRLHF concatenates every
turn into one sequence, so unlike the paper's store-only prompt the context grows with each
observation; the factutil process advantage still lands on each action's own tokens
(``make_executor`` records the spans).

Settings (environment of the Ray workers; the run script sets them with ``--factutil.env``):

    FACTAGENT_RETRIEVER_URL   retrieval endpoint (default http://127.0.0.1:8000/retrieve)
    FACTAGENT_TOPK            passages per search (default 3)
    FACTAGENT_TURN_FORMAT     "plain" (feedback appended as text) or "chatml" (as a user turn)
    FACTUTIL_MAX_TURNS        the turn limit, factutil's max_turns (default 8)

Check it against a running retrieval server (no GPU, no OpenRLHF needed): replays one rollout of
the bundled sample through the environment and prints each turn::

    python examples/openrlhf/factagent_agent.py --retriever-url http://127.0.0.1:8000/retrieve
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from factutil.metrics import outcome_reward
from factutil.tools.agent import FactAgentEpisode, Retriever
from factutil.tools.retrieval import RetrievalClient

DEFAULT_RETRIEVER_URL = "http://127.0.0.1:8000/retrieve"
TURN_FORMATS = ("plain", "chatml")


class StepResult:
    """What one turn gives back: the action kind, the feedback text, whether the episode ends,
    its reward and per-turn logs.

    (A plain class: OpenRLHF loads this file without registering it in ``sys.modules``, where
    ``dataclasses`` would look for it.)
    """

    def __init__(self, action: str, feedback: str, done: bool, reward: float = 0.0, logs=None):
        self.action = action
        self.feedback = feedback
        self.done = done
        self.reward = reward
        self.logs: dict[str, float] = logs or {}


class FactAgentEnv:
    """One FactAgent episode (:class:`factutil.tools.agent.FactAgentEpisode`) with OpenRLHF's
    feedback format and reward.

    Args:
        golden_answers: the question's gold answers (for the F1 outcome reward).
        retriever: the search backend (``search(query) -> SearchResult``), e.g. a
            :class:`factutil.tools.retrieval.RetrievalClient`; a failed search is fed back.
        max_turns: actions allowed; the last one that is not an answer ends the episode with 0.
        turn_format: ``"plain"`` or ``"chatml"`` (feedback wrapped as a ChatML user turn).
    """

    def __init__(self, golden_answers: list[str], retriever: Retriever, max_turns: int = 8,
                 turn_format: str = "plain"):
        if turn_format not in TURN_FORMATS:
            raise ValueError(f"turn_format must be one of {TURN_FORMATS}, got {turn_format!r}")
        self.golden_answers = golden_answers
        self.turn_format = turn_format
        self.episode = FactAgentEpisode("", retriever, max_turns)
        self.retrieval_errors = 0

    def _wrap(self, text: str) -> str:
        if self.turn_format == "chatml":
            # The action already ends with <|im_end|> (the EOS token vLLM returns with it).
            return f"\n<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
        return f"\n{text}\n"

    async def step(self, action_text: str) -> StepResult:
        """Apply one model action; never raises for any text (a bad action is fed back)."""
        turn = await asyncio.to_thread(self.episode.step, action_text)
        self.retrieval_errors += turn.result is not None and not turn.result.ok
        logs = {"turns": float(len(self.episode.actions)),
                "retrieval_errors": float(self.retrieval_errors)}
        if turn.action.action == "answer":
            size = len(self.episode.store)
            outcome = outcome_reward(turn.action.answer, self.golden_answers, size)
            logs.update(em=outcome.em, f1=outcome.f1, store_size=float(size))
            return StepResult("answer", "", True, outcome.score, logs)
        return StepResult(turn.action.action, turn.feedback and self._wrap(turn.feedback),
                          turn.done, 0.0, logs)


def agent_settings(environ: Any = None) -> dict[str, Any]:
    """The agent's settings from the environment (see the module doc).

    Raises:
        ValueError: a bad ``FACTAGENT_TOPK`` or ``FACTAGENT_TURN_FORMAT`` (naming the variable), or
            a bad ``FACTUTIL_*`` setting (``factutil_openrlhf.SettingsError``).
    """
    from factutil_openrlhf import config_from_env

    environ = os.environ if environ is None else environ
    try:
        topk = int(environ.get("FACTAGENT_TOPK", "3"))
        if topk < 1:
            raise ValueError
    except ValueError:
        raise ValueError(f"FACTAGENT_TOPK must be a positive integer, got {environ.get('FACTAGENT_TOPK')!r}") from None
    turn_format = environ.get("FACTAGENT_TURN_FORMAT", "plain")
    if turn_format not in TURN_FORMATS:
        raise ValueError(f"FACTAGENT_TURN_FORMAT must be one of {TURN_FORMATS}, got {turn_format!r}")
    return {
        "url": environ.get("FACTAGENT_RETRIEVER_URL", DEFAULT_RETRIEVER_URL),
        "topk": topk,
        "turn_format": turn_format,
        "max_turns": config_from_env(environ).max_turns,
    }


def _openrlhf_classes():
    """``AgentInstance`` and ``AgentExecutor`` for OpenRLHF (imports OpenRLHF and torch)."""
    import torch
    from factutil_openrlhf import golden_answers_from_label, make_executor
    from openrlhf.utils.agent import AgentInstanceBase

    settings = agent_settings()

    class AgentInstance(AgentInstanceBase):
        """One FactAgent episode; OpenRLHF builds one per sample, without arguments."""

        def __init__(self, *args, **kwargs):
            self.env: FactAgentEnv | None = None

        async def reset(self, states: dict, **kwargs):
            self.env = FactAgentEnv(
                golden_answers_from_label(states.get("label")),
                RetrievalClient(settings["url"], settings["topk"]),
                max_turns=settings["max_turns"],
                turn_format=settings["turn_format"],
            )
            return {"observation": states["observation"]}

        async def step(self, state_dict: dict, **kwargs):
            result = await self.env.step(state_dict["action_text"])
            reward = torch.tensor(result.reward)
            return {
                "rewards": reward,
                "scores": reward,
                "environment_feedback": result.feedback,
                "done": result.done,
                "extra_logs": result.logs,
            }

    return AgentInstance, make_executor(AgentInstance)


def check(argv: list[str] | None = None) -> int:
    """Replay one sample rollout through :class:`FactAgentEnv` against a live retrieval server."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--retriever-url", default=os.environ.get("FACTAGENT_RETRIEVER_URL", DEFAULT_RETRIEVER_URL))
    parser.add_argument("--topk", type=int, default=3)
    sample = Path(__file__).resolve().parents[1] / "data" / "2wiki_rollouts.jsonl"
    parser.add_argument("--rollouts", type=Path, default=sample, help="docs/method.md §8 rollouts to replay")
    parser.add_argument("--index", type=int, default=0, help="which line of --rollouts")
    args = parser.parse_args(argv)
    with args.rollouts.open(encoding="utf-8") as handle:
        rollout = json.loads(handle.readlines()[args.index])

    def text_of(item: dict[str, Any]) -> str:
        if "raw" in item:
            return item["raw"]
        if item["action"] == "assert":
            return json.dumps({"action": "assert", "facts": item["triples"]}, ensure_ascii=False)
        return json.dumps({key: value for key, value in item.items() if key != "observation"}, ensure_ascii=False)

    env = FactAgentEnv(rollout["golden_answers"], RetrievalClient(args.retriever_url, args.topk))
    print(f"question: {rollout['question']}  gold: {rollout['golden_answers']}")

    async def replay() -> StepResult | None:
        result = None
        for item in rollout["actions"]:
            result = await env.step(text_of(item))
            print(f"[{len(env.episode.actions)}] {result.action}: {result.feedback.strip()[:160]!r}")
            if result.done:
                break
        return result

    result = asyncio.run(replay())
    print(f"reward: {result.reward if result else 0.0}  retrieval errors: {env.retrieval_errors}")
    if env.retrieval_errors:
        print(f"cannot reach the retrieval API at {args.retriever_url}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(check())
else:
    # OpenRLHF loads this file with importlib (module name "agent_module") and instantiates
    # AgentExecutor() in each vLLM engine actor.
    AgentInstance, AgentExecutor = _openrlhf_classes()
