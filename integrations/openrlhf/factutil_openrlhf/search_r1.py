"""A Search-R1-style agent for OpenRLHF 0.11: no FactAgent prompt needed (docs/method.md §9).

Give this file to OpenRLHF as the agent (it defines ``AgentExecutor``)::

    --train.agent_func_path "$(python -c 'import factutil_openrlhf.search_r1 as m; print(m.__file__)')"

with ``FACTUTIL_FACTS=retrieved`` among the run's settings, so each search is credited for the
passages it brought. The prompt is the dataset's own. Each generation stops at ``</search>`` or
``</answer>`` (kept); a search asks the Search-R1 ``/retrieve`` service and its passages follow in
``<information>``; an answer ends the episode with its outcome reward (answer F1 against the
sample's label, :func:`factutil.metrics.outcome_reward`); a turn with a refused tag pair gets
Search-R1's notice; a turn that stops without a tag ends the episode with 0; so does the last of
``FACTUTIL_MAX_TURNS``.

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
from factutil.parse import parse_action
from factutil.schema import AnswerAction, SearchAction
from factutil.tools.retrieval import RetrievalClient
from factutil.tools.search_r1 import INVALID, STOP, information, with_observation
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
        self.turns = 0
        self.golden_answers: list[str] = []
        self.max_turns = config_from_env().max_turns
        self.retriever = retriever_from_env()

    async def reset(self, states: dict, **kwargs: Any) -> dict:
        self.golden_answers = golden_answers_from_label(states.get("label"))
        return {"observation": states["observation"]}

    async def step(self, state_dict: dict, **kwargs: Any) -> dict:
        """One turn: its feedback, reward and whether the episode ends (never raises for a text)."""
        self.turns += 1
        text = state_dict["action_text"]
        action = parse_action(text)
        if isinstance(action, AnswerAction):
            score = outcome_reward(action.answer, self.golden_answers, None).score
            return _result(score, "", True)
        observation = None
        if isinstance(action, SearchAction):
            result = await asyncio.to_thread(self.retriever.search, action.query)
            feedback, observation = result.observation, with_observation(action, result).observation
        elif text.rstrip().endswith(STOP):
            feedback = INVALID
        else:  # the model stopped without a tag, or ran out of room
            return _result(0.0, "", True)
        last = self.turns >= self.max_turns
        return {**_result(0.0, "" if last else information(feedback), last),
                "factutil_observation": observation}


def _result(reward: float, feedback: str, done: bool) -> dict[str, Any]:
    value = torch.tensor(float(reward))
    return {"rewards": value, "scores": value, "environment_feedback": feedback, "done": done}


AgentExecutor = make_executor(SearchR1Instance, stop=STOP)
