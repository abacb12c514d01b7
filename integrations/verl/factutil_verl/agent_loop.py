"""The ``factagent`` agent loop: one verl sample per action (docs/method.md §1, action-level GRPO).

For one question the loop takes up to ``max_turns`` actions. Each turn's prompt is the chat
template over the question, the fact store and the latest search result (never the history).
The agent is :class:`factutil.tools.agent.FactAgentEpisode`, the FactAgent every adapter rolls
out: the response is parsed with :func:`factutil.parse.parse_action`; ``search`` calls a
Search-R1 ``/retrieve`` service (:class:`factutil.tools.retrieval.RetrievalClient`; a timeout or
HTTP error becomes an observation saying so), ``assert`` adds its triples to the store,
``answer`` ends the rollout, an invalid action changes nothing.

It returns a list of :class:`AgentLoopOutput`, one per action; verl's V1 agent-loop worker writes
each as its own row (key ``{uid}_{session_id}_{index}``). Each row's ``response_mask`` covers that
action's tokens, and ``extra_fields["factutil"]`` carries ``trajectory_id``, ``step``, ``action``
(``kind``, ``query``, ``triples``, ``answer``, ``error``), ``question``, ``golden_answers``,
``store_size`` (before the action) and ``retrieval_error``. Register name: ``factagent``; options
come from the agent-loop YAML (:class:`factutil_verl.config.FactAgentLoopConfig`).

With ``algorithm.factutil.prepare_in_workers`` (default: on in semantic mode with asserted facts) the loop also makes
the rollout's per-fact work in this worker once the rollout ends (its facts' embeddings on the
worker's GPU when it has one, for the facts this worker has not shipped before:
:class:`factutil.preparer.FactPreparer`) and puts the work item (:mod:`factutil.workers`) in the
last row's ``extra_fields["factutil"]["work"]``; Ray moves its arrays as they are, and the
trainer's step checks it and takes its vectors into its clusterer's cache
(:mod:`factutil_verl.advantage`).

verl's legacy (non-V1) agent-loop worker takes one output per sample: use ``trainer.use_v1=True``.

:class:`RetrieverAgentLoop` is what this loop shares with the ``search_r1`` loop
(:mod:`factutil_verl.search_r1`): options, the method's config, the retrieval client, a rollout's
start (question, gold answers, ids) and one generation.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar
from uuid import uuid4

from factutil.preparer import WORK_KEY, FactPreparer, prepares_in_workers
from factutil.tools.agent import INSTRUCTIONS, FactAgentEpisode, build_messages
from factutil.tools.retrieval import RetrievalClient
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)
from verl.workers.rollout.replica import TokenOutput

from factutil_verl.advantage import EXTRA_KEY, action_fields
from factutil_verl.config import (
    FactAgentLoopConfig,
    RetrieverLoopConfig,
    agent_loop_config,
    factutil_config_from_verl,
    to_plain,
)
from factutil_verl.reward import golden_answers_of

logger = logging.getLogger("factutil_verl")

AGENT_NAME = "factagent"
_OBSERVATION_SHRINK = 0.6
_SHRINK_TRIES = 4


def question_of(kwargs: Mapping[str, Any]) -> str:
    """The question of a dataset row: ``extra_info.question``, else the last user message."""
    extra_info = to_plain(kwargs.get("extra_info")) or {}
    if isinstance(extra_info, Mapping) and isinstance(extra_info.get("question"), str):
        return extra_info["question"]
    messages = kwargs.get("raw_prompt")
    if hasattr(messages, "tolist"):
        messages = messages.tolist()
    for message in reversed(list(messages or [])):
        if isinstance(message, Mapping) and message.get("role") == "user":
            return str(message.get("content", ""))
    raise ValueError("the sample has neither extra_info.question nor a user message in raw_prompt")


@dataclass
class RolloutStart:
    """What one rollout of a dataset row starts from: its question and gold answers, trajectory and
    request ids, the keywords of every generation and whether log-probs are kept."""

    question: str
    golden_answers: list[str]
    trajectory_id: str
    request_id: str
    generate_kwargs: dict[str, Any]
    want_logprobs: bool


@dataclass
class Generation:
    """One generation: its token ids (cut to the limit asked), their log-probs (None when not
    kept; 0.0 where the server gave none), seconds taken and the server's output."""

    token_ids: list[int]
    logprobs: list[float] | None
    seconds: float
    output: TokenOutput


class RetrieverAgentLoop(AgentLoopBase):
    """What the retrieving agent loops share (``factagent``, ``search_r1``): the options, the
    method's config, the Search-R1 ``/retrieve`` client, a rollout's start and one generation.

    Args:
        trainer_config, server_manager, tokenizer, processor, dataset_cls, data_config,
        hf_model_type: as :class:`verl.experimental.agent_loop.agent_loop.AgentLoopBase`.
        tools: verl's tool list (unused: retrieval is the loop's own action).
        name: the registry name (given by an agent-loop YAML entry; unused).
        **options: fields of the subclass's ``options_model``.

    Raises:
        FactUtilConfigError: a bad option or ``algorithm.factutil`` key (named in the message).
    """

    options_model: ClassVar[type[RetrieverLoopConfig]] = RetrieverLoopConfig
    agent_name: ClassVar[str] = ""

    def __init__(
        self,
        trainer_config: Any,
        server_manager: Any,
        tokenizer: Any,
        processor: Any,
        dataset_cls: Any,
        data_config: Any,
        hf_model_type: str | None = None,
        tools: Any = None,
        name: str | None = None,
        **options: Any,
    ):
        super().__init__(
            trainer_config,
            server_manager,
            tokenizer,
            processor,
            dataset_cls,
            data_config,
            hf_model_type=hf_model_type,
        )
        self.options = agent_loop_config(options, self.options_model, self.agent_name)
        self.factutil_config = factutil_config_from_verl(self.config.get("algorithm"))
        self.max_turns = self.options.max_turns or self.factutil_config.max_turns
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)
        self.retriever = RetrievalClient(
            self.options.retriever_url,
            topk=self.options.topk,
            timeout_s=self.options.timeout_s,
            retries=self.options.retries,
            max_observation_chars=self.options.max_observation_chars,
        )

    def start_rollout(self, kwargs: Mapping[str, Any]) -> RolloutStart:
        """The start of a rollout of the dataset row ``kwargs``.

        Raises:
            ValueError: the row has no question or no gold answer (a data error).
        """
        question = question_of(kwargs)
        reward_model = to_plain(kwargs.get("reward_model")) or {}
        golden = golden_answers_of(
            reward_model.get("ground_truth") if isinstance(reward_model, Mapping) else None
        )
        if not golden:
            raise ValueError(f"sample {kwargs.get('uid')!r} has no reward_model.ground_truth")
        uid, session = kwargs.get("uid"), kwargs.get("session_id")
        trajectory_id = (
            f"{uid}_{session}" if uid is not None and session is not None else uuid4().hex
        )
        if getattr(self.rollout_config, "full_determinism", False):
            request_id = f"det-{trajectory_id}"
        else:
            request_id = uuid4().hex
        generate_kwargs: dict[str, Any] = {}
        if "priority" in kwargs:
            generate_kwargs["priority"] = int(kwargs["priority"])
        want_logprobs = bool(getattr(self.rollout_config, "calculate_log_probs", False))
        return RolloutStart(question, golden, trajectory_id, request_id, generate_kwargs,
                            want_logprobs)

    async def generate_turn(
        self,
        rollout: RolloutStart,
        prompt_ids: list[int],
        sampling_params: Mapping[str, Any],
        limit: int,
    ) -> Generation:
        """One generation after ``prompt_ids`` (``max_action_tokens`` applied), cut to ``limit``
        tokens."""
        params = dict(sampling_params)
        if self.options.max_action_tokens is not None:
            params["max_tokens"] = min(self.options.max_action_tokens,
                                       params.get("max_tokens", self.options.max_action_tokens))
        started = time.perf_counter()
        generated = await self.server_manager.generate(
            request_id=rollout.request_id,
            prompt_ids=prompt_ids,
            sampling_params=params,
            **rollout.generate_kwargs,
        )
        seconds = time.perf_counter() - started
        token_ids = list(generated.token_ids)[:limit]
        logprobs = None
        if rollout.want_logprobs:
            logprobs = list(generated.log_probs or [])[: len(token_ids)]
            logprobs += [0.0] * (len(token_ids) - len(logprobs))
        return Generation(token_ids, logprobs, seconds, generated)

    def filler_token(self) -> int:
        """The token a response with no generated token holds (verl writes the reward on the last
        response token), with no loss on it: EOS, else padding, else 0."""
        for token in (self.tokenizer.eos_token_id, self.tokenizer.pad_token_id):
            if token is not None:
                return token
        return 0


@register(AGENT_NAME)
class FactAgentLoop(RetrieverAgentLoop):
    """FactAgent: a search agent whose prompt holds only question, fact store and observation.

    Args: as :class:`RetrieverAgentLoop`; ``**options`` are
    :class:`factutil_verl.config.FactAgentLoopConfig` fields (retriever_url, topk, timeout_s,
    retries, max_observation_chars, max_turns, max_action_tokens, instructions).
    """

    options_model = FactAgentLoopConfig
    agent_name = AGENT_NAME

    _preparers: ClassVar[dict[Any, FactPreparer]] = {}
    """One per worker process and config (verl makes a loop per sample): the embedder loads once."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.instructions = self.options.instructions or INSTRUCTIONS
        self.preparer: FactPreparer | None = None
        if prepares_in_workers(self.factutil_config):
            self.preparer = self._preparers.setdefault(
                self.factutil_config, FactPreparer(self.factutil_config, logger)
            )

    async def _prompt_ids(self, agent: FactAgentEpisode) -> list[int]:
        """Token ids of one turn's prompt; a too-long observation is cut before verl's own cap."""
        observation = agent.observation
        for _ in range(_SHRINK_TRIES):
            ids = await self.ct_build_initial_tokens(
                build_messages(agent.question, agent.store, observation, self.instructions))
            if len(ids) < self.prompt_length or not observation:
                return ids
            observation = observation[: int(len(observation) * _OBSERVATION_SHRINK)]
        return ids

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:
        """Roll out one question; returns one :class:`AgentLoopOutput` per action, in order.

        Args:
            sampling_params: verl's sampling parameters (copied for each generation).
            **kwargs: the dataset row (``raw_prompt``, ``reward_model``, ``extra_info``, ``uid``,
                ``session_id``, ...).

        Raises:
            ValueError: the row has no question or no gold answer (a data error).
        """
        rollout = self.start_rollout(kwargs)
        agent = FactAgentEpisode(rollout.question, self.retriever, self.max_turns,
                                 self.factutil_config.triple_template)
        outputs: list[AgentLoopOutput] = []
        while not agent.done:
            step, store_size = len(agent.actions), len(agent.store)
            prompt_ids = await self._prompt_ids(agent)
            generated = await self.generate_turn(rollout, prompt_ids, sampling_params,
                                                 self.response_length)
            response_ids = generated.token_ids
            response_mask = [1] * len(response_ids)
            logprobs = generated.logprobs
            if not response_ids:
                response_ids = [self.filler_token()]
                response_mask = [0]
                logprobs = [0.0] if rollout.want_logprobs else None
            text = self.tokenizer.decode(response_ids, skip_special_tokens=True)
            turn = await asyncio.to_thread(agent.step, text)
            routed = generated.output.routed_experts
            num_preempted = generated.output.num_preempted
            outputs.append(
                AgentLoopOutput(
                    prompt_ids=prompt_ids,
                    response_ids=response_ids,
                    response_mask=response_mask,
                    response_logprobs=logprobs,
                    routed_experts=routed[: len(prompt_ids) + self.response_length]
                    if routed is not None
                    else None,
                    num_turns=2,
                    metrics=AgentLoopMetrics(
                        generate_sequences=generated.seconds,
                        tool_calls=turn.result.seconds if turn.result else 0.0,
                        num_preempted=num_preempted if num_preempted is not None else -1,
                    ),
                    extra_fields={
                        EXTRA_KEY: {
                            "trajectory_id": rollout.trajectory_id,
                            "step": step,
                            "action": action_fields(turn.action),
                            "question": rollout.question,
                            "golden_answers": rollout.golden_answers,
                            "store_size": store_size,
                            "retrieval_error": turn.result.error if turn.result else None,
                        }
                    },
                )
            )
        if self.preparer is not None and outputs:
            # off the event loop: the other rollouts of this worker keep generating meanwhile
            work = await asyncio.to_thread(self.preparer, agent.actions)
            if work is None or len(work["parts"]):  # None: the worker failed (counted by the trainer)
                outputs[-1].extra_fields[EXTRA_KEY][WORK_KEY] = work
        return outputs
