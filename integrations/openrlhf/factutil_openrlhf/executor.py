"""``make_executor``: an OpenRLHF ``AgentExecutor`` that records each action and its token span.

OpenRLHF 0.11's ``MultiTurnAgentExecutor.execute`` builds one ``AgentInstance`` per sample,
alternates ``llm_engine.generate`` and ``AgentInstance.step`` and returns a response dict with
``action_ranges``; the runs of one prompt go through ``asyncio.gather``. The wrapper keeps that
loop untouched and records, per episode (a ``contextvars`` value, so concurrent episodes never
mix), each action's parsed form (:func:`factutil.parse.parse_action` on the action text, docs/method.md
§1) and its ``[start, end)`` token span as measured on the engine call. The record goes into the
response under ``"factutil"`` (see :data:`factutil_openrlhf.settings.PAYLOAD_KEY`):

    {"version": 1, "actions": [{"action": "search", "query": ...}, ...],
     "spans": [[start, end], ...], "step_rewards": [...], "done": true}

or ``{"version": 1, "error": "..."}`` when the recorded spans disagree with ``action_ranges``
(that sample's group then keeps OpenRLHF's advantages).

With ``prepare_in_workers`` (default: on in semantic mode with asserted facts) the executor also makes the episode's
per-fact work here, inside the vLLM engine actor, once the episode ends (its facts' embeddings
on the engine's GPU when it has one, for the facts this engine has not shipped before:
:class:`factutil.preparer.FactPreparer`) and adds it to the payload as ``"work"``: the base64
text of the work item's ``.npz`` bytes (:func:`factutil.workers.work_bytes`), so the payload
stays JSON. It rides with the sample to ``compute_advantages_and_returns``, whose step checks it
and takes its vectors into its clusterer's cache, computing the rest.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import logging
from collections.abc import Sequence
from typing import Any

from factutil_openrlhf._hook import requested_config
from factutil_openrlhf.settings import PAYLOAD_KEY, as_config

logger = logging.getLogger("factutil.openrlhf")

PAYLOAD_VERSION = 1
REWARD_MODES = ("final", "sum")

_episode: contextvars.ContextVar[_Episode | None] = contextvars.ContextVar(
    "factutil_openrlhf_episode", default=None
)


class _Episode:
    """What one ``execute`` call saw: parsed actions, spans, step rewards."""

    def __init__(self) -> None:
        self.actions: list[dict[str, Any]] = []
        self.spans: list[list[int]] = []
        self.step_rewards: list[float] = []
        self.done = False

    def record_step(self, action_text: str, result: dict[str, Any], reward: str) -> dict[str, Any]:
        from factutil.integration import action_row
        from factutil.parse import parse_action
        from factutil.search_r1 import split_turns

        row = action_row(parse_action(action_text))
        if row.get("action") == "search" and not row.get("observation"):
            # what the search retrieved: the agent's own word when it gives one, else the
            # retrieved block of its feedback (facts="retrieved" reads it), whatever follows it
            feedback = str(result.get("environment_feedback") or "")
            turns = split_turns(action_text + feedback)
            observation = (result["factutil_observation"] if "factutil_observation" in result
                           else next((seen for _, seen in turns if seen), None))
            calls = [parse_action(text) for text, _ in split_turns(action_text)]
            if len(calls) > 1 and all(call.action == "search" for call in calls) and (
                    "factutil_observation" not in result):
                # parallel tool calls: one span, so one search of every call's query, observing
                # every reply (the core reads a text of several blocks block by block)
                row["query"] = "; ".join(call.query for call in calls)
                replies = [reply for _, reply in turns[:len(calls)] if reply]
                observation = feedback if len(replies) > 1 else next(iter(replies), None)
            if observation:
                row["observation"] = observation
        self.actions.append(row)
        rewards = result.get("rewards")
        value = rewards.item() if hasattr(rewards, "item") else rewards
        self.step_rewards.append(float(value) if value is not None else 0.0)
        done = bool(result.get("done"))
        self.done = self.done or done
        if reward == "final" and not done and hasattr(rewards, "item"):
            import torch

            # OpenRLHF sums step rewards; only the outcome (the done step's) may reach `rewards`.
            result = {**result, "rewards": torch.zeros_like(rewards)}
        return result

    def payload(self, action_ranges: Any) -> dict[str, Any]:
        ranges = [[int(start), int(end)] for start, end in (action_ranges or [])]
        if ranges != self.spans:
            return {
                "version": PAYLOAD_VERSION,
                "error": f"recorded spans {self.spans} differ from action_ranges {ranges}",
            }
        if len(self.actions) != len(self.spans):
            return {
                "version": PAYLOAD_VERSION,
                "error": f"{len(self.actions)} steps recorded for {len(self.spans)} generations",
            }
        return {
            "version": PAYLOAD_VERSION,
            "actions": self.actions,
            "spans": self.spans,
            "step_rewards": self.step_rewards,
            "done": self.done,
        }


class _SpanRecordingEngine:
    """Stands in for the ``llm_engine`` of one episode: measures each generation's token span."""

    def __init__(self, engine: Any, episode: _Episode):
        self._engine = engine
        self._episode = episode

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        output = await self._engine.generate(
            prompt_token_ids, sampling_params, multi_modal_data=multi_modal_data
        )
        start = len(prompt_token_ids)
        self._episode.spans.append([start, start + len(output.outputs[0].token_ids)])
        return output

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


def make_executor(
    agent_instance_cls: type, *, reward: str = "final", prepare: bool | None = None,
    stop: Sequence[str] = (),
) -> type:
    """An OpenRLHF ``AgentExecutor`` class for ``agent_instance_cls`` that records factutil's payload.

    Use it as the agent file's ``AgentExecutor`` (``--train.agent_func_path``)::

        class AgentInstance(AgentInstanceBase): ...
        AgentExecutor = make_executor(AgentInstance)

    The class subclasses OpenRLHF's ``MultiTurnAgentExecutor`` and takes no constructor argument
    (OpenRLHF instantiates it as ``AgentExecutor()``); each sample gets its own instance of a
    subclass of ``agent_instance_cls`` whose ``step`` records the action (see the module doc).
    Safe under ``asyncio.gather`` of many episodes.

    Args:
        agent_instance_cls: a subclass of ``openrlhf.utils.agent.AgentInstanceBase`` whose
            ``__init__`` takes no argument.
        reward: ``"final"`` (default): only the reward of the step that returns ``done=True``
            (the outcome reward, docs/method.md §1) reaches OpenRLHF's ``rewards``; earlier step rewards
            are zeroed (they are kept in the payload's ``step_rewards``) and an episode that never
            reaches ``done`` scores 0. ``"sum"``: OpenRLHF's own sum of step rewards.
        prepare: do each episode's work in the engine and ship it in the payload; None
            (default): as the run's config says (``prepare_in_workers``; the config
            :func:`factutil_openrlhf.install` was given, else the ``FACTUTIL_*`` environment),
            read on the first episode.
        stop: stop strings added to every generation of the episode, kept in its text (vLLM's
            ``stop`` and ``include_stop_str_in_output``), e.g.
            :data:`factutil.search_r1.STOP` for a Search-R1-style agent.

    A search's observation (for ``facts="retrieved"``) is the step result's
    ``"factutil_observation"`` when the agent returns one (None: it retrieved nothing), else the
    retrieved block (any layout of :data:`factutil.search_r1.LAYOUTS`) its ``environment_feedback``
    starts with.

    Returns:
        The executor class.

    Raises:
        TypeError: ``agent_instance_cls`` is not an ``AgentInstanceBase`` subclass.
        ValueError: an unknown ``reward`` mode.
        ImportError: OpenRLHF is not importable.
    """
    from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

    if not (isinstance(agent_instance_cls, type) and issubclass(agent_instance_cls, AgentInstanceBase)):
        raise TypeError(
            "agent_instance_cls must subclass openrlhf.utils.agent.AgentInstanceBase, got "
            f"{agent_instance_cls!r}"
        )
    if reward not in REWARD_MODES:
        raise ValueError(f"reward must be one of {REWARD_MODES}, got {reward!r}")

    async def step(self, state_dict, **kwargs):
        result = await super(recording, self).step(state_dict, **kwargs)
        episode = _episode.get()
        if episode is not None:
            result = episode.record_step(state_dict.get("action_text", ""), result, reward)
        return result

    recording = type(
        f"FactUtilRecording{agent_instance_cls.__name__}",
        (agent_instance_cls,),
        {"step": step, "__module__": agent_instance_cls.__module__},
    )

    class AgentExecutor(MultiTurnAgentExecutor):
        __doc__ = (
            f"OpenRLHF MultiTurnAgentExecutor over {agent_instance_cls.__name__} that adds the "
            f"factutil payload to each response (factutil_openrlhf.make_executor)."
        )

        def __init__(self):
            super().__init__(recording)
            self._factutil_config: Any = None
            self._factutil_preparer: Any = None
            self._factutil_prepare = prepare

        def factutil_config(self) -> Any:
            """The run's ``FactUtilConfig`` as the engine reads it (once); None when it cannot
            be read here (one warning: the trainer's step then does the samples' work)."""
            if self._factutil_config is None:
                try:
                    self._factutil_config = as_config(requested_config())
                except ValueError:  # SettingsError, ConfigError
                    logger.warning("factutil: no config in the engine; the samples' work is "
                                   "left to the trainer", exc_info=True)
                    self._factutil_config, self._factutil_prepare = False, False
            return self._factutil_config or None

        def factutil_preparer(self) -> Any:
            """The engine's :class:`factutil.preparer.FactPreparer`; None when it ships none
            (or the run's config cannot be read here: the trainer's step then does the work)."""
            if self._factutil_preparer is None and self._factutil_prepare is not False:
                from factutil.preparer import FactPreparer, prepares_in_workers

                config = self.factutil_config()
                if config is None:
                    return None
                if self._factutil_prepare is None:
                    self._factutil_prepare = prepares_in_workers(config)
                if self._factutil_prepare:
                    self._factutil_preparer = FactPreparer(config, logger)
            return self._factutil_preparer

        async def execute(
            self, prompt, label, sampling_params, max_length: int, hf_tokenizer, llm_engine, images=None
        ):
            if stop:
                sampling_params = copy.deepcopy(sampling_params)
                sampling_params.stop = list(stop)
                sampling_params.include_stop_str_in_output = True
            episode = _Episode()
            token = _episode.set(episode)
            try:
                response = await super().execute(
                    prompt,
                    label,
                    sampling_params,
                    max_length,
                    hf_tokenizer,
                    _SpanRecordingEngine(llm_engine, episode),
                    images=images,
                )
            finally:
                _episode.reset(token)
            payload = episode.payload(response.get("action_ranges"))
            preparer = self.factutil_preparer()
            if preparer is not None and "actions" in payload:
                from factutil.preparer import WORK_KEY

                # off the event loop: the engine's other episodes keep generating meanwhile
                text = await asyncio.to_thread(preparer.text, payload["actions"])
                if text != "":  # "": every fact was shipped before; None: counted as missing
                    payload[WORK_KEY] = text
            response[PAYLOAD_KEY] = payload
            return response

    AgentExecutor.__module__ = agent_instance_cls.__module__
    return AgentExecutor
