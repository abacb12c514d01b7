"""The FactAgent ``rollout_func`` of TRL's GRPOTrainer (docs/method.md §1): search, assert, answer.

TRL trains on one sequence per rollout: the prompt, then every turn of the episode in one
completion. :class:`FactAgentRollout` builds it turn by turn with the policy itself:

- the prompt is the FactAgent prompt of the first turn
  (:func:`factutil.tools.agent.build_messages`: instructions, question, empty store, no search
  result) through the model's chat template;
- each turn the model writes one action (at most ``max_action_tokens`` tokens), which
  :class:`factutil.tools.agent.FactAgentEpisode` reads, the FactAgent every adapter rolls out:
  ``search`` asks the retriever (the same :class:`factutil.tools.retrieval.RetrievalClient` the
  verl loop uses), ``assert`` adds its triples to the store, ``answer`` ends the episode, an
  invalid action changes nothing;
- the environment's reply (the search result, the store, or why the action was invalid) is
  appended as a user turn of the chat template, with ``env_mask`` 0 on its tokens so no loss
  falls on them.

Unlike the paper's store-only prompt, the context grows with the episode (TRL's loss reads each
token given everything before it, so the model must have generated it given the same); the
credit still lands on each action's own tokens. Each completion carries a ``factutil`` payload
(forwarded by TRL to the reward functions and read by
:class:`factutil_trl.FactUtilGRPOTrainer`): the question, the parsed actions (docs/method.md §8
items), each action's ``[start, end)`` token span in the completion, the answer and the store
size when it answered.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from factutil.schema import FactUtilConfig
from factutil.tools.agent import INSTRUCTIONS, FactAgentEpisode, Retriever, Turn

PAYLOAD_KEY = "factutil"
"""The ``rollout_func`` output key (a dataset-row key in the trainer) of each payload."""

Generate = Callable[[Any, list[list[int]], int], list[list[int]]]
"""``generate(trainer, contexts, max_new_tokens) -> new tokens per context`` (each cut after its
first end-of-turn token, which it keeps)."""


def question_of(prompt: Any) -> str:
    """The question of a TRL prompt: the string itself, or the last user message's content (its
    text blocks joined by newlines when the content is a list of typed blocks,
    ``[{"type": "text", "text": ...}, ...]``).

    Raises:
        ValueError: a conversational prompt without a user message with text, or another type.
    """
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        for message in reversed(list(prompt)):
            if isinstance(message, dict) and message.get("role") == "user":
                content = message.get("content")
                if isinstance(content, list):  # typed blocks: their text
                    content = "\n".join(block["text"] for block in content if isinstance(block, dict)
                                        and block.get("type") == "text"
                                        and isinstance(block.get("text"), str)) or None
                if isinstance(content, str):
                    return content
    raise ValueError(
        f"prompt must be the question (str) or chat messages with a user message, got {prompt!r}"[
            :200
        ]
    )


def left_pad(contexts: Sequence[Sequence[int]], pad: int) -> tuple[Any, Any]:
    """Token id lists left-padded into one batch, as ``generate`` of a causal LM takes them.

    Args:
        contexts: per row, its token ids (at least one row).
        pad: the id written before each shorter row.

    Returns:
        ``(input_ids, attention_mask)``: torch int64 (B, W), W the longest row; the mask is 1 on
        each row's own tokens.
    """
    width = max(len(ids) for ids in contexts)
    input_ids = torch.full((len(contexts), width), pad, dtype=torch.long)
    attention = torch.zeros((len(contexts), width), dtype=torch.long)
    for row, ids in enumerate(contexts):
        input_ids[row, width - len(ids) :] = torch.tensor(list(ids), dtype=torch.long)
        attention[row, width - len(ids) :] = 1
    return input_ids, attention


def transformers_generate(
    trainer: Any, contexts: list[list[int]], max_new_tokens: int, stop_strings: Sequence[str] = ()
) -> list[list[int]]:
    """Sample one action per context with the trainer's own model and sampling settings.

    The contexts are left-padded into one batch; sampling follows ``trainer.generation_config``
    (temperature, top-p, top-k, ... of ``GRPOConfig``) with ``max_new_tokens`` replaced and
    generation also stopping at ``stop_strings``. The model is unwrapped as TRL does for its own
    generation (DeepSpeed / FSDP gathering).

    Returns:
        per context, the new token ids up to and including the first of
        ``trainer.eos_token_ids`` (all of them when none was generated).
    """
    from trl.models import unwrap_model_for_generation

    tokenizer = trainer.processing_class
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else trainer.eos_token_ids[0]
    input_ids, attention = left_pad(contexts, pad)
    width = input_ids.shape[1]
    device = trainer.accelerator.device
    config = copy.deepcopy(trainer.generation_config)
    config.max_new_tokens = max_new_tokens
    if stop_strings:
        config.stop_strings = list(stop_strings)
    with (
        unwrap_model_for_generation(
            trainer.model_wrapped,
            trainer.accelerator,
            gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
            generation_kwargs=trainer.generation_kwargs,
            gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
        ) as model,
        torch.no_grad(),
    ):
        output = model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention.to(device),
            generation_config=config,
            tokenizer=tokenizer,
        )
    stops = set(trainer.eos_token_ids)
    new_tokens = []
    for row in output[:, width:].tolist():
        end = next((i + 1 for i, token in enumerate(row) if token in stops), len(row))
        new_tokens.append(row[:end])
    return new_tokens


def check_counts(rollout: Any) -> None:
    """A rollout's ``max_turns``, ``max_action_tokens`` and ``search_threads`` are ints >= 1.

    Raises:
        ValueError: one is not (named with its value).
    """
    for name in ("max_turns", "max_action_tokens", "search_threads"):
        value = getattr(rollout, name)
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def next_turn_ids(tokenizer: Any, content: str) -> list[int]:
    """Token ids that follow a finished assistant turn: ``content`` as a user turn, then the
    assistant's opening (the chat template rendered around a stand-in turn, as TRL does for tool
    replies).

    Raises:
        ValueError: the template renders the shorter conversation differently from the start of
            the longer one (the reply tokens cannot be isolated).
    """
    turn = [{"role": "user", "content": "?"}, {"role": "assistant", "content": "!"}]
    prefix = tokenizer.apply_chat_template(turn, tokenize=True, return_dict=False)
    full = tokenizer.apply_chat_template(
        turn + [{"role": "user", "content": content}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    eos = [i for i, token in enumerate(prefix) if token == tokenizer.eos_token_id]
    if eos:
        prefix = prefix[: eos[-1] + 1]  # the turn ends at its end-of-turn token, not the newline
    if full[: len(prefix)] != prefix:
        raise ValueError(
            "the chat template renders a conversation and its continuation differently"
        )
    return list(full[len(prefix) :])


def roll_out(rollout: Any, trainer: Any, prompt_ids: list[list[int]], episodes: list[Episode],
             agents: list[Any]) -> dict[str, list[Any]]:
    """The turn loop of a rollout function (:class:`FactAgentRollout`,
    :class:`factutil_trl.SearchR1Rollout`): every unfinished episode's turn generated in one
    batch within its budget (``max_action_tokens``, what ``max_completion_length`` leaves), cut by
    ``rollout.cut``, read by its agent (searches in ``rollout.search_threads`` threads), then
    closed when it ends the episode (:meth:`Episode.close`) or answered by ``rollout.reply``.

    Returns:
        ``{"prompt_ids", "completion_ids", "logprobs": None, "env_mask", "factutil"}``, one entry
        per episode.
    """
    tokenizer, limit = trainer.processing_class, trainer.max_completion_length
    with ThreadPoolExecutor(max_workers=rollout.search_threads) as pool:
        while True:
            budgets = {i: rollout.max_action_tokens if limit is None else
                       min(rollout.max_action_tokens, limit - len(e.completion))
                       for i, e in enumerate(episodes) if not e.done}
            active = [i for i, budget in budgets.items() if budget > 0]
            if not active:
                break
            new_tokens = rollout.generate(trainer, [prompt_ids[i] + episodes[i].completion
                                                    for i in active],
                                          max(budgets[i] for i in active))
            turns = {i: pool.submit(agents[i].step, episodes[i].add_turn(
                         rollout.cut(list(ids)[: budgets[i]], tokenizer), tokenizer))
                     for i, ids in zip(active, new_tokens)}
            for i, future in turns.items():
                turn, episode = future.result(), episodes[i]
                episode.record(turn, getattr(agents[i], "store", None))
                if episode.done:
                    episode.close(tokenizer.eos_token_id, set(trainer.eos_token_ids), limit)
                else:
                    rollout.reply(episode, turn, trainer)
    return {
        "prompt_ids": prompt_ids,
        "completion_ids": [e.completion for e in episodes],
        "logprobs": None,
        "env_mask": [e.mask for e in episodes],
        PAYLOAD_KEY: [e.payload() for e in episodes],
    }


class FactAgentRollout:
    """A TRL ``rollout_func``: one multi-turn FactAgent episode per prompt (docs/method.md §1).

    Pass it as ``GRPOTrainer(..., rollout_func=FactAgentRollout(retriever))``. TRL repeats every
    question ``num_generations`` times before calling it, so each call rolls out one episode per
    prompt it gets, all turns of all episodes batched together.

    Args:
        retriever: the search backend, e.g. ``factutil.tools.retrieval.RetrievalClient(url, topk=3,
            max_observation_chars=600)`` (a Search-R1 ``/retrieve`` service such as
            ``factutil serve``). A failed search comes back as an observation saying so.
        instructions: the system text of the prompt (default: the verl loop's).
        max_turns: most actions per episode; None: ``FactUtilConfig().max_turns`` (8).
        max_action_tokens: most tokens per action (the model's turn is cut there).
        triple_template: ``FactUtilConfig.triple_template`` (which facts the store holds once).
        generate: how actions are sampled (:data:`Generate`); default
            :func:`transformers_generate` with the trainer's model; pass one for vLLM or a test.
        search_threads: concurrent searches per turn.

    Raises:
        ValueError: ``max_turns``, ``max_action_tokens`` or ``search_threads`` below 1.
    """

    def __init__(
        self,
        retriever: Retriever,
        *,
        instructions: str = INSTRUCTIONS,
        max_turns: int | None = None,
        max_action_tokens: int = 64,
        triple_template: str | None = None,
        generate: Generate | None = None,
        search_threads: int = 8,
    ):
        defaults = FactUtilConfig()
        self.retriever = retriever
        self.instructions = instructions
        self.max_turns = defaults.max_turns if max_turns is None else max_turns
        self.max_action_tokens = max_action_tokens
        self.triple_template = triple_template or defaults.triple_template
        self.generate = generate or transformers_generate
        self.search_threads = search_threads
        check_counts(self)

    def cut(self, ids: list[int], tokenizer: Any) -> list[int]:
        """A turn's new tokens as the turn (the generator stops at the end-of-turn token)."""
        return ids

    def reply(self, episode: Episode, turn: Turn, trainer: Any) -> None:
        """The environment's reply to an unfinished turn as a user turn (``env_mask`` 0), after
        an end-of-turn token where the turn was cut at its budget; none, and the episode ends,
        when it leaves no room for another action (a search's observation is then dropped: the
        model never read it)."""
        tokenizer, limit = trainer.processing_class, trainer.max_completion_length
        reply = next_turn_ids(tokenizer, turn.feedback)
        if not episode.completion or episode.completion[-1] not in set(trainer.eos_token_ids):
            reply = [tokenizer.eos_token_id, *reply]  # close a turn cut at its budget
        if limit is not None and len(episode.completion) + len(reply) >= limit:
            episode.done = True  # no room left for another action
            if "observation" in episode.actions[-1]:  # nor for the reply: unseen
                episode.actions[-1]["observation"] = None
            return
        episode.add_reply(reply)

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        """Roll out one episode per prompt.

        Args:
            prompts: TRL's prompts (question strings, or chat messages whose last user message
                is the question).
            trainer: the ``GRPOTrainer`` (its model, tokenizer, sampling settings and
                ``max_completion_length``).

        Returns:
            ``{"prompt_ids", "completion_ids", "logprobs": None, "env_mask", "factutil"}``, one
            entry per prompt: ``env_mask`` is 1 on the model's tokens and 0 on the environment's.
        """
        tokenizer = trainer.processing_class
        episodes = [Episode(question_of(prompt)) for prompt in prompts]
        agents = [FactAgentEpisode(e.question, self.retriever, self.max_turns, self.triple_template)
                  for e in episodes]
        prompt_ids = [
            list(tokenizer.apply_chat_template(agent.messages(self.instructions),
                                               add_generation_prompt=True, tokenize=True,
                                               return_dict=False))
            for agent in agents
        ]
        return roll_out(self, trainer, prompt_ids, episodes, agents)


class Episode:
    """One episode's record as TRL trains on it: its completion tokens, mask, each turn's span, the
    payload's actions, the answer and the store size when it answered (None without a store)."""

    def __init__(self, question: str):
        self.question = question
        self.completion: list[int] = []
        self.mask: list[int] = []
        self.spans: list[list[int]] = []
        self.actions: list[dict[str, Any]] = []
        self.answer: str | None = None
        self.store_size: int | None = None
        self.retrieval_errors = 0
        self.done = False

    def add_turn(self, ids: list[int], tokenizer: Any) -> str:
        """Append the model's tokens of one turn; returns its text."""
        start = len(self.completion)
        self.completion += ids
        self.mask += [1] * len(ids)
        self.spans.append([start, len(self.completion)])
        return tokenizer.decode(ids, skip_special_tokens=True)

    def add_reply(self, ids: list[int]) -> None:
        """Append the environment's tokens (``env_mask`` 0: no loss falls on them)."""
        self.completion += ids
        self.mask += [0] * len(ids)

    def close(self, eos: int, stops: set[int], limit: int | None) -> None:
        """End the finished episode with ``eos`` (``env_mask`` 0) unless its last turn ended with
        one of ``stops`` or no room is left under ``limit``: TRL takes a completion whose last
        token ends no turn for one cut by ``max_completion_length`` (mask_truncated_completions)."""
        if self.completion and self.completion[-1] not in stops and (
                limit is None or len(self.completion) < limit):
            self.add_reply([eos])

    def record(self, turn: Turn, store: Sequence[Any] | None = None) -> None:
        """The turn read by the agent (:class:`factutil.tools.agent.Turn`): its action in the
        payload, a failed search counted, the answer (and ``store``'s size) when it ends."""
        self.actions.append(turn.action.model_dump(mode="json"))
        self.retrieval_errors += turn.result is not None and not turn.result.ok
        self.done = turn.done
        if turn.action.action == "answer":
            self.answer = turn.action.answer
            self.store_size = None if store is None else len(store)

    def payload(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "actions": self.actions,
            "spans": self.spans,
            "answer": self.answer,
            "store_size": self.store_size,
            "retrieval_errors": self.retrieval_errors,
        }
