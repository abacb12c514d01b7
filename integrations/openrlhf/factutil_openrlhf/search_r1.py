"""A Search-R1-style agent for OpenRLHF 0.11: no FactAgent prompt needed (docs/method.md §9).

Give this file to OpenRLHF as the agent (it defines ``AgentExecutor``)::

    --train.agent_func_path "$(python -c 'import factutil_openrlhf.search_r1 as m; print(m.__file__)')"

with ``FACTUTIL_FACTS=retrieved`` among the run's settings, so each search is credited for the
passages it brought. The prompt is the dataset's own. Each generation stops at ``</search>`` or
``</answer>`` (kept); the turn protocol is :class:`factutil.tools.agent.SearchR1Episode`'s, the one
every adapter uses: a search asks the Search-R1 ``/retrieve`` service and its passages follow in
``<information>``; an answer ends the episode with its outcome reward (answer F1 against the
sample's label, :func:`factutil.metrics.outcome_reward`); any other turn (no tag, a refused tag, a
cut turn) gets Search-R1's invalid-action notice and the episode goes on, until
``FACTUTIL_MAX_TURNS`` turns (0 without an answer).

Settings (environment of the engines): ``FACTUTIL_RETRIEVAL_URL`` (default
``http://127.0.0.1:8000/retrieve``, what ``factutil serve`` listens on) and
``FACTUTIL_RETRIEVAL_TOPK`` (passages per search, default 3).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import torch
from openrlhf.utils.agent import AgentInstanceBase

from factutil.metrics import outcome_reward
from factutil.search_r1 import STOP
from factutil.tools.agent import SearchR1Episode
from factutil.tools.retrieval import RetrievalClient
from factutil_openrlhf.executor import make_executor
from factutil_openrlhf.settings import config_from_env, golden_answers_from_label

URL_VARIABLE = "FACTUTIL_RETRIEVAL_URL"
TOPK_VARIABLE = "FACTUTIL_RETRIEVAL_TOPK"
DEFAULT_URL = "http://127.0.0.1:8000/retrieve"


def retriever_from_env(environ: Any = None) -> RetrievalClient:
    """The retrieval client the settings name.

    Raises:
        ValueError: ``FACTUTIL_RETRIEVAL_TOPK`` is not a positive integer (named).
    """
    environ = os.environ if environ is None else environ
    text = environ.get(TOPK_VARIABLE, "3")
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{TOPK_VARIABLE} must be a positive integer, got {text!r}")
    return RetrievalClient(environ.get(URL_VARIABLE, DEFAULT_URL), topk=int(text))


class SearchR1Instance(AgentInstanceBase):
    """One Search-R1-style episode; OpenRLHF builds one per sample, without arguments."""

    def __init__(self, *args: Any, **kwargs: Any):
        self.golden_answers: list[str] = []
        self.episode = SearchR1Episode(retriever_from_env(), config_from_env().max_turns)

    async def reset(self, states: dict, **kwargs: Any) -> dict:
        """Raises ValueError: the sample's label holds no gold answer (named)."""
        self.golden_answers = golden_answers_from_label(states.get("label"))
        if not self.golden_answers:
            raise ValueError(f"label {states.get('label')!r:.200} holds no gold answer (see "
                             "--data.label_key; Search-R1's data: reward_model)")
        return {"observation": states["observation"]}

    async def step(self, state_dict: dict, **kwargs: Any) -> dict:
        """One turn: its feedback, reward and whether the episode ends (never raises for a text)."""
        turn = await asyncio.to_thread(self.episode.step, state_dict["action_text"])
        answer = turn.action.answer if turn.action.action == "answer" else None
        score = outcome_reward(answer, self.golden_answers, None).score if answer is not None else 0.0
        observation = turn.action.observation if turn.action.action == "search" else None
        return {**_result(score, turn.feedback, turn.done), "factutil_observation": observation}


def _result(reward: float, feedback: str, done: bool) -> dict[str, Any]:
    value = torch.tensor(float(reward))
    return {"rewards": value, "scores": value, "environment_feedback": feedback, "done": done}


AgentExecutor = make_executor(SearchR1Instance, stop=STOP)
