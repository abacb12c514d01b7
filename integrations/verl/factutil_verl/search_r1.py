"""The ``search_r1`` agent loop: a Search-R1-style agent, one verl row per rollout (method.md §9).

The prompt is the dataset's own (``raw_prompt`` through the chat template; no FactAgent
instructions). The model writes one turn at a time: generation stops at ``</search>`` or
``</answer>`` (the loop's ``stop`` strings, kept in the output), at its own EOS or at the
response budget. The turn protocol is :class:`factutil.tools.agent.SearchR1Episode`'s, the one
every adapter uses: a search asks the Search-R1 ``/retrieve`` service
(:class:`factutil.tools.retrieval.RetrievalClient`) and its ``<information>`` block is appended
(response mask 0; a failed search's message, or "No documents found.", is appended the same way
but the action carries no observation: it retrieved no passage); an answer ends the rollout; any
other turn (no tag, an empty query, a cut turn) gets Search-R1's invalid-action notice (mask 0)
and the model goes on; up to ``max_turns`` turns or the response budget. The next turn's prompt
is the prompt and the response so far, token for token, as Search-R1 continues its text.

It returns one :class:`AgentLoopOutput` in the **span layout** of :mod:`factutil_verl.advantage`:
``extra_fields["factutil"]`` = ``{"trajectory_id", "actions", "spans", "question",
"golden_answers"}``, ``actions`` the turns' :func:`factutil.integration.fixed_key_row` dicts (a
search with its ``observation``, so ``+algorithm.factutil.facts=retrieved`` reads its passages)
and ``spans`` each turn's ``[start, end)`` response tokens. Register name: ``search_r1``; options:
:class:`factutil_verl.config.SearchR1LoopConfig`. The per-fact work of ``prepare_in_workers`` is
not made here: the trainer's step computes it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from factutil.tools.agent import SearchR1Episode
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput, register

from factutil_verl.advantage import EXTRA_KEY, action_fields
from factutil_verl.agent_loop import RetrieverAgentLoop
from factutil_verl.config import SearchR1LoopConfig, to_plain

SEARCH_R1_NAME = "search_r1"


@register(SEARCH_R1_NAME)
class SearchR1Loop(RetrieverAgentLoop):
    """A Search-R1-style agent over the dataset's prompt: ``<search>`` turns, retrieved
    ``<information>``, an ``<answer>``; one row per rollout with each turn's span.

    Args: as :class:`factutil_verl.agent_loop.RetrieverAgentLoop`; ``**options`` are
    :class:`factutil_verl.config.SearchR1LoopConfig` fields.
    """

    options_model = SearchR1LoopConfig
    agent_name = SEARCH_R1_NAME

    def _tokens(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Roll out one question; returns the rollout as one :class:`AgentLoopOutput`.

        Args:
            sampling_params: verl's sampling parameters (copied for each turn, the stop strings
                and the remaining response budget added).
            **kwargs: the dataset row (``raw_prompt``, ``reward_model``, ``extra_info``, ``uid``,
                ``session_id``, ...).

        Raises:
            ValueError: the row has no question or no gold answer (a data error).
        """
        rollout = self.start_rollout(kwargs)
        messages = to_plain(kwargs.get("raw_prompt"))
        if hasattr(messages, "tolist"):
            messages = messages.tolist()
        prompt_ids = await self.ct_build_initial_tokens(list(messages))
        params = dict(sampling_params)
        if self.options.stop:
            params["stop"] = list(self.options.stop)
            params["include_stop_str_in_output"] = True
        response: list[int] = []
        mask: list[int] = []
        logprobs: list[float] = []
        episode = SearchR1Episode(self.retriever, self.max_turns)
        spans: list[list[int]] = []
        generate_seconds = tool_seconds = 0.0
        num_preempted = 0
        while not episode.done:
            budget = self.response_length - len(response)
            if budget <= 0:
                break
            turn = await self.generate_turn(rollout, prompt_ids + response,
                                            {**params, "max_tokens": budget}, budget)
            generate_seconds += turn.seconds
            num_preempted += turn.output.num_preempted or 0
            spans.append([len(response), len(response) + len(turn.token_ids)])
            response += turn.token_ids
            mask += [1] * len(turn.token_ids)
            logprobs += turn.logprobs or [0.0] * len(turn.token_ids)
            text = self.tokenizer.decode(turn.token_ids, skip_special_tokens=True)
            read = await asyncio.to_thread(episode.step, text)
            tool_seconds += read.result.seconds if read.result else 0.0
            added = self._tokens(read.feedback)[: self.response_length - len(response)]
            response += added
            mask += [0] * len(added)
            logprobs += [0.0] * len(added)
        actions = [action_fields(action) for action in episode.actions]
        if not response:
            response, mask, logprobs = [self.filler_token()], [0], [0.0]
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response,
            response_mask=mask,
            response_logprobs=logprobs if rollout.want_logprobs else None,
            num_turns=2 * len(actions) + 1,
            metrics=AgentLoopMetrics(
                generate_sequences=generate_seconds,
                tool_calls=tool_seconds,
                num_preempted=num_preempted,
            ),
            extra_fields={
                EXTRA_KEY: {
                    "trajectory_id": rollout.trajectory_id,
                    "actions": actions,
                    "spans": spans,
                    "question": rollout.question,
                    "golden_answers": rollout.golden_answers,
                }
            },
        )
