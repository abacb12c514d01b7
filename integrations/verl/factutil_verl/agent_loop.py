"""The ``factagent`` agent loop: one verl sample per action (docs/method.md §1, action-level GRPO).

For one question the loop takes up to ``max_turns`` actions. Each turn's prompt is the chat
template over the question, the fact store and the latest search result (never the history:
:mod:`factutil.tools.agent`). The response is parsed with :func:`factutil.parse.parse_action`:
``search`` calls a Search-R1 ``/retrieve`` service (:class:`factutil.tools.retrieval.RetrievalClient`;
a timeout or HTTP error becomes an observation saying so), ``assert`` adds its triples to the
store, ``answer`` ends the rollout, an invalid action changes nothing.

It returns a list of :class:`AgentLoopOutput`, one per action; verl's V1 agent-loop worker writes
each as its own row (key ``{uid}_{session_id}_{index}``). Each row's ``response_mask`` covers that
action's tokens, and ``extra_fields["factutil"]`` carries ``trajectory_id``, ``step``, ``action``
(``kind``, ``query``, ``triples``, ``answer``, ``error``), ``question``, ``golden_answers``,
``store_size`` (before the action) and ``retrieval_error``. Register name: ``factagent``; options
come from the agent-loop YAML (:class:`factutil_verl.config.FactAgentLoopConfig`).

With ``algorithm.factutil.prepare_in_workers`` (default: on in semantic mode) the loop also makes
the rollout's per-fact work in this worker once the rollout ends (its facts' texts, embeddings on
the worker's GPU when it has one, and filter analyses, for the facts this worker has not shipped
before: :class:`factutil.preparer.FactPreparer`) and puts the
:class:`factutil.workers.FactWork` in the last row's ``extra_fields["factutil"]["work"]``; Ray
moves its vectors without copying, and the trainer's step takes it into its clusterer's caches
(:mod:`factutil_verl.advantage`).

verl's legacy (non-V1) agent-loop worker takes one output per sample: use ``trainer.use_v1=True``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any, ClassVar
from uuid import uuid4

from factutil.parse import parse_action
from factutil.preparer import WORK_KEY, FactPreparer, prepares_in_workers
from factutil.schema import AnswerAction, AssertAction, SearchAction, Triple
from factutil.tools.agent import INSTRUCTIONS, add_to_store, build_messages
from factutil.tools.retrieval import RetrievalClient
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

from factutil_verl.advantage import EXTRA_KEY, action_fields
from factutil_verl.config import agent_loop_config, factutil_config_from_verl, to_plain
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


@register(AGENT_NAME)
class FactAgentLoop(AgentLoopBase):
    """FactAgent: a search agent whose prompt holds only question, fact store and observation.

    Args:
        trainer_config, server_manager, tokenizer, processor, dataset_cls, data_config,
        hf_model_type: as :class:`verl.experimental.agent_loop.agent_loop.AgentLoopBase`.
        tools: verl's tool list (unused: retrieval is the loop's own action).
        name: the registry name (given by an agent-loop YAML entry; unused).
        **options: :class:`factutil_verl.config.FactAgentLoopConfig` fields (retriever_url, topk,
            timeout_s, retries, max_observation_chars, max_turns, max_action_tokens, instructions).

    Raises:
        FactUtilConfigError: a bad option or ``algorithm.factutil`` key (named in the message).
    """

    _preparers: ClassVar[dict[Any, FactPreparer]] = {}
    """One per worker process and config (verl makes a loop per sample): the embedder loads once."""

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
        self.options = agent_loop_config(options)
        self.factutil_config = factutil_config_from_verl(self.config.get("algorithm"))
        self.max_turns = self.options.max_turns or self.factutil_config.max_turns
        self.instructions = self.options.instructions or INSTRUCTIONS
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)
        self.preparer: FactPreparer | None = None
        if prepares_in_workers(self.factutil_config):
            self.preparer = self._preparers.setdefault(
                self.factutil_config, FactPreparer(self.factutil_config, logger)
            )
        self.retriever = RetrievalClient(
            self.options.retriever_url,
            topk=self.options.topk,
            timeout_s=self.options.timeout_s,
            retries=self.options.retries,
            max_observation_chars=self.options.max_observation_chars,
        )

    async def _prompt_ids(self, question: str, store: list[Triple], observation: str) -> list[int]:
        """Token ids of one turn's prompt; a too-long observation is cut before verl's own cap."""
        for _ in range(_SHRINK_TRIES):
            ids = await self.ct_build_initial_tokens(
                build_messages(question, store, observation, self.instructions)
            )
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

        store: list[Triple] = []
        observation = ""
        outputs: list[AgentLoopOutput] = []
        actions: list[Any] = []
        for step in range(self.max_turns):
            prompt_ids = await self._prompt_ids(question, store, observation)
            params = dict(sampling_params)
            if self.options.max_action_tokens is not None:
                params["max_tokens"] = self.options.max_action_tokens
            started = time.perf_counter()
            generated = await self.server_manager.generate(
                request_id=request_id,
                prompt_ids=prompt_ids,
                sampling_params=params,
                **generate_kwargs,
            )
            generate_seconds = time.perf_counter() - started
            response_ids = list(generated.token_ids)[: self.response_length]
            response_mask = [1] * len(response_ids)
            logprobs = (
                list(generated.log_probs or [])[: len(response_ids)] if want_logprobs else None
            )
            if logprobs is not None and len(logprobs) < len(response_ids):
                logprobs += [0.0] * (len(response_ids) - len(logprobs))
            if not response_ids:
                # verl writes the reward on the last response token: keep one, with no loss on it.
                filler = self.tokenizer.eos_token_id
                if filler is None:
                    filler = (
                        self.tokenizer.pad_token_id
                        if self.tokenizer.pad_token_id is not None
                        else 0
                    )
                response_ids = [filler]
                response_mask = [0]
                logprobs = [0.0] if want_logprobs else None
            text = self.tokenizer.decode(response_ids, skip_special_tokens=True)
            action = parse_action(text)
            actions.append(action)
            store_size = len(store)
            retrieval_error: str | None = None
            tool_seconds = 0.0
            if isinstance(action, SearchAction):
                result = await asyncio.to_thread(self.retriever.search, action.query)
                observation, retrieval_error, tool_seconds = (
                    result.observation,
                    result.error,
                    result.seconds,
                )
            elif isinstance(action, AssertAction):
                add_to_store(store, action.triples, self.factutil_config.triple_template)
            routed = generated.routed_experts
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
                        generate_sequences=generate_seconds,
                        tool_calls=tool_seconds,
                        num_preempted=generated.num_preempted
                        if generated.num_preempted is not None
                        else -1,
                    ),
                    extra_fields={
                        EXTRA_KEY: {
                            "trajectory_id": trajectory_id,
                            "step": step,
                            "action": action_fields(action),
                            "question": question,
                            "golden_answers": golden,
                            "store_size": store_size,
                            "retrieval_error": retrieval_error,
                        }
                    },
                )
            )
            if isinstance(action, AnswerAction):
                break
        if self.preparer is not None and outputs:
            # off the event loop: the other rollouts of this worker keep generating meanwhile
            work = await asyncio.to_thread(self.preparer, actions)
            if work is None or len(work):  # None: the worker failed (counted by the trainer)
                outputs[-1].extra_fields[EXTRA_KEY][WORK_KEY] = work
        return outputs
