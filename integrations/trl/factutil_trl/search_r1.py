"""A Search-R1-style ``rollout_func`` for TRL's GRPOTrainer: no FactAgent prompt (docs/method.md §9).

The agent writes ``<search>query</search>``, reads the retrieved passages in ``<information>`` and
ends with ``<answer>…</answer>`` (Search-R1, ReSearch, ZeroSearch and the verl / TRL search
recipes). The prompt is the dataset's own (TRL's prompt through the chat template); the episode
continues one assistant text, as Search-R1 does: each turn is generated up to the first of
:data:`factutil.search_r1.STOP` (kept) or the end of turn, the environment's text is appended with
``env_mask`` 0, and the next turn continues the text. The turn protocol is
:class:`factutil.tools.agent.SearchR1Episode`'s, the one every adapter uses: a search's passages
follow in ``<information>``, an answer ends the episode, any other turn gets Search-R1's
invalid-action notice and the episode goes on, up to ``max_turns`` or the completion budget. With
``facts="retrieved"`` in the trainer's ``factutil_config`` each search is credited for the passages
it brought (the payload's searches carry their observation).

The payload is :class:`factutil_trl.FactAgentRollout`'s, so :class:`factutil_trl.FactUtilGRPOTrainer`
and :func:`factutil_trl.factagent_reward` read it unchanged (``store_size`` is None: no fact store).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from factutil.schema import FactUtilConfig
from factutil.search_r1 import LAYOUTS, STOP
from factutil.tools.agent import Retriever, SearchR1Episode

from factutil_trl.rollout import (
    Episode,
    Generate,
    check_counts,
    question_of,
    roll_out,
    transformers_generate,
)


def messages_of(prompt: Any) -> list[dict[str, Any]]:
    """A TRL prompt as chat messages: a string becomes one user message."""
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)


def cut_at_stop(ids: Sequence[int], tokenizer: Any, stops: Sequence[str]) -> list[int]:
    """``ids`` up to the first token whose text completes one of ``stops`` (all of them when none
    does): a generator that ran past a stop string is cut where vLLM's ``stop`` would have cut."""
    ids = list(ids)

    def stopped(end: int) -> bool:
        text = tokenizer.decode(ids[:end], skip_special_tokens=True)
        return any(stop in text for stop in stops)

    if not stops or not stopped(len(ids)):
        return ids
    low, high = 1, len(ids)  # the shortest prefix that holds a stop string: it only grows
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if stopped(middle) else (middle + 1, high)
    return ids[:low]


def shown_observation(action: dict[str, Any], block: str) -> None:
    """Keep of a search's observation (``action``, a payload item, in place) what the model saw of
    its block, cut by the completion budget: from the opening tag on, without the closing one, so
    the cut passage is no fact (docs/method.md §9); none when the tag itself was cut."""
    if action.get("observation") is not None:
        start = block.find(LAYOUTS["search_r1"][0])
        action["observation"] = block[start:] if start >= 0 else None


class SearchR1Rollout:
    """A TRL ``rollout_func``: one Search-R1-style episode per prompt.

    Pass it as ``FactUtilGRPOTrainer(..., rollout_func=SearchR1Rollout(retriever),
    factutil_config={"facts": "retrieved"})``.

    Args:
        retriever: the search backend, e.g. ``factutil.tools.retrieval.RetrievalClient(url,
            topk=3)``; a failed search comes back as its message in ``<information>``.
        max_turns: most turns per episode; None: ``FactUtilConfig().max_turns`` (8).
        max_action_tokens: most tokens per turn.
        generate: how a turn is sampled (:data:`factutil_trl.rollout.Generate`); default
            :func:`factutil_trl.rollout.transformers_generate` stopping at ``stop``. Whatever it
            returns is cut after the first stop string (:func:`cut_at_stop`).
        stop: the stop strings, kept in the turn.
        search_threads: concurrent searches per turn.

    Raises:
        ValueError: ``max_turns``, ``max_action_tokens`` or ``search_threads`` below 1.
    """

    def __init__(
        self,
        retriever: Retriever,
        *,
        max_turns: int | None = None,
        max_action_tokens: int = 256,
        generate: Generate | None = None,
        stop: Sequence[str] = STOP,
        search_threads: int = 8,
    ):
        self.retriever = retriever
        self.max_turns = FactUtilConfig().max_turns if max_turns is None else max_turns
        self.max_action_tokens = max_action_tokens
        self.stop = tuple(stop)
        self.generate = generate or functools.partial(transformers_generate, stop_strings=self.stop)
        self.search_threads = search_threads
        check_counts(self)

    def cut(self, ids: list[int], tokenizer: Any) -> list[int]:
        """A turn's new tokens up to its first stop string (:func:`cut_at_stop`)."""
        return cut_at_stop(ids, tokenizer, self.stop)

    def reply(self, episode: Episode, turn: Any, trainer: Any) -> None:
        """The retrieved block (or the notice) after an unfinished turn, ``env_mask`` 0, cut by
        what ``max_completion_length`` leaves; a search then keeps as observation only what
        was shown (:func:`shown_observation`)."""
        tokenizer, limit = trainer.processing_class, trainer.max_completion_length
        block = tokenizer.encode(turn.feedback, add_special_tokens=False)
        if limit is not None and len(block) > limit - len(episode.completion):
            block = block[: limit - len(episode.completion)]
            shown_observation(episode.actions[-1], tokenizer.decode(block, skip_special_tokens=True))
        episode.add_reply(block)

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        """Roll out one episode per prompt; returns what :class:`factutil_trl.FactAgentRollout`
        returns (``prompt_ids``, ``completion_ids``, ``logprobs`` None, ``env_mask``, payloads)."""
        tokenizer = trainer.processing_class
        prompt_ids = [
            list(tokenizer.apply_chat_template(messages_of(prompt), add_generation_prompt=True,
                                               tokenize=True, return_dict=False))
            for prompt in prompts
        ]
        episodes = [Episode(question_of(prompt)) for prompt in prompts]
        agents = [SearchR1Episode(self.retriever, self.max_turns) for _ in prompts]
        return roll_out(self, trainer, prompt_ids, episodes, agents)
