"""The ``factutil`` trainer mode: verl's sync V1 trainer with FactAgent advantages (docs/method.md §5).

Select it with ``trainer.v1.trainer_mode=factutil`` (and ``algorithm.adv_estimator=grpo``). It is
:class:`verl.trainer.ppo.v1.PPOTrainerSync` with one override, :meth:`FactUtilTrainer._compute_advantage`:
the rows of each group are rebuilt into factutil rollouts, scored by
:func:`factutil.compute_process_advantages` and written back as ``advantages`` and ``returns``.
Groups that cannot be scored keep verl's GRPO values (see :mod:`factutil_verl.advantage`). verl's
own advantage step runs first when it changes more than the advantages (KL in the reward, rollout
correction), else only when a row keeps its values: factutil overwrites every other row.

The run's clusterer, early scoring, report writer and step metrics are
:class:`factutil.integration.TrainerStep`'s. With ``algorithm.factutil.score_early`` (default on)
and no KL in the reward, the batch's scoring starts in its background thread as soon as the
rewards are known (before verl computes the old log-probs), keyed by the batch's keys, uids,
masks and rewards; the advantage step takes that score when they are unchanged (else it scores
again) and puts verl's GRPO values on the fallback rows
(:func:`factutil_verl.advantage.with_grpo_fallback`): the same numbers either way.
With ``+algorithm.factutil.report_every=N`` the HTML credit report of every N-th step's batch is
written to ``<trainer.default_local_dir>/factutil_reports/step_NNNNNN.html``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import torch
import transfer_queue as tq
from factutil.integration import TrainerStep
from omegaconf import DictConfig
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.workers.utils.padding import response_to_nested

from factutil_verl.advantage import (
    FactAgentAdvantages,
    compute_factagent_advantages,
    grpo_rows,
    with_grpo_fallback,
)
from factutil_verl.config import FactUtilConfigError, factutil_config_from_verl

logger = logging.getLogger("factutil_verl")

TRAINER_MODE = "factutil"


def _as_list(value: Any) -> list[Any]:
    """A TransferQueue non-tensor column (NonTensorStack, LinkedList, array) as a plain list."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    return list(value)


@dataclass
class _Inputs:
    """What the scoring of one batch reads from TransferQueue (rows in the batch's key order)."""

    keys: list[str]
    uids: list[str]
    extra_fields: list[Any]
    response_mask: Any  # (B, T) padded tensor: the mask the actions are placed on
    rewards: Any  # (B, T) padded tensor
    trained_mask: Any  # (B, T) padded tensor: the mask now in TransferQueue
    is_padding: list[bool]
    nested_mask: Any  # TransferQueue's jagged response_mask, for writing back

    def key(self) -> tuple[Any, ...]:
        """The rows, masks and rewards, as an early score's key (the extra fields, the agent
        loop's actions and their workers' work, are left out: they do not change within a step)."""
        tensors = [(tuple(t.shape), t.detach().to("cpu", torch.float64).numpy().tobytes())
                   for t in (self.response_mask, self.rewards)]
        return (tuple(self.keys), tuple(self.uids), tuple(self.is_padding), *tensors)


@register_trainer(TRAINER_MODE)
class FactUtilTrainer(PPOTrainerSync):
    """verl's synchronous V1 PPO trainer whose advantages are FactAgent's A = A_out + Ω·A_proc.

    Args:
        config: verl's whole Hydra config; ``algorithm.factutil`` holds the
            :class:`factutil.FactUtilConfig` fields.

    Raises:
        FactUtilConfigError: a bad ``algorithm.factutil.<key>`` (the message names it), or
            ``algorithm.adv_estimator`` is not ``grpo``.
    """

    def __init__(self, config: DictConfig):
        # Validate before verl builds anything, so a typo fails in seconds, naming the key.
        self.factutil_config = factutil_config_from_verl(config.algorithm)
        estimator = str(config.algorithm.get("adv_estimator", ""))
        if estimator != "grpo":
            raise FactUtilConfigError(
                f"algorithm.adv_estimator: trainer.v1.trainer_mode={TRAINER_MODE} needs 'grpo' "
                f"(its fallback and outcome advantage), got {estimator!r}"
            )
        self.factutil_step = TrainerStep(
            self.factutil_config, str(config.trainer.get("default_local_dir", ".")), logger)
        super().__init__(config)

    # verl's base class switches to its async replay buffer, checkpoint and refill paths whenever
    # trainer_mode != "sync"; this trainer is the sync one under another name.
    @property
    def trainer_mode(self) -> str:
        """Always ``"sync"``: verl's base class reads it to choose its sync code paths."""
        return "sync"

    @trainer_mode.setter
    def trainer_mode(self, value: str) -> None:
        self.registered_mode = value

    def _reward_field(self) -> str:
        return "token_level_rewards" if self.config.algorithm.use_kl_in_reward else "rm_scores"

    def _factutil_inputs(self, batch: KVBatchMeta, extra: bool = True,
                         layout: Any = None) -> _Inputs:
        """The batch's scoring inputs from TransferQueue; without ``extra`` the rows' extra fields
        (the actions and their workers' work, most of what is read) are left out
        (``extra_fields`` is then empty). ``layout``: the (B, T) mask to place the actions on,
        read before verl's rollout correction rejected tokens (None: the mask read now)."""
        reward_field = self._reward_field()
        fields = ["uid", "response_mask", reward_field] + (["extra_fields"] if extra else [])
        data = tq.kv_batch_get(
            keys=batch.keys,
            partition_id=batch.partition_id,
            select_fields=fields,
        )
        nested_mask = data["response_mask"]
        uids = [str(uid) for uid in _as_list(data.pop("uid"))]
        extra_fields = _as_list(data.pop("extra_fields")) if extra else []
        padded = data.to_padded_tensor()
        tags = list(batch.tags) if batch.tags else [{}] * len(batch.keys)
        inputs = _Inputs(
            keys=list(batch.keys), uids=uids, extra_fields=extra_fields,
            response_mask=padded["response_mask"] if layout is None else layout,
            rewards=padded[reward_field], trained_mask=padded["response_mask"],
            is_padding=[bool(tag.get("is_padding", False)) for tag in tags],
            nested_mask=nested_mask,
        )
        return inputs

    def _factutil_score(self, batch: KVBatchMeta, read: list | None = None,
                        layout: Any = None) -> FactAgentAdvantages:
        """The batch read from TransferQueue (its client is thread-safe) and scored without
        verl's GRPO values (:func:`with_grpo_fallback` adds them); ``read`` gets the key
        (:meth:`_Inputs.key`) of the rows it read; ``layout`` as in :meth:`_factutil_inputs`."""
        inputs = self._factutil_inputs(batch, layout=layout)
        if read is not None:
            read.append(inputs.key())
        step = self.factutil_step
        return compute_factagent_advantages(
            keys=inputs.keys,
            uids=inputs.uids,
            extra_fields=inputs.extra_fields,
            response_mask=inputs.response_mask,
            token_level_rewards=inputs.rewards,
            grpo_advantages=None,
            config=step.config,
            clusterer=step.clusterer,
            is_padding=inputs.is_padding,
        )

    def _compute_old_log_prob(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        """verl's old log-probs; with ``score_early`` (and no KL in the reward) the batch's
        reading and scoring start first, in the step's background thread, so they run while the
        driver waits on the actor workers (the driver reads nothing here: the key the advantage
        step compares is that of the rows the thread read). A failure leaves the scoring to the
        advantage step."""
        if self.factutil_config.score_early and not self.config.algorithm.use_kl_in_reward:
            try:
                read: list = []  # filled by the thread before its score returns
                self.factutil_step.start(read, lambda: self._factutil_score(batch, read))
            except Exception:
                logger.exception("factutil: could not start scoring early; the advantage step "
                                 "scores the batch")
        return super()._compute_old_log_prob(batch, metrics)

    def _verl_first(self, batch: KVBatchMeta) -> bool:
        """Whether verl's own advantage step must run before factutil's: it changes more than
        ``advantages`` and ``returns`` (KL in the reward: the rewards; rollout correction, which
        verl applies when the batch has ``rollout_log_probs``: the mask and its weights and
        metrics), or the batch's fields are unknown."""
        algorithm = self.config.algorithm
        correction = algorithm.get("rollout_correction", None)
        return bool(algorithm.use_kl_in_reward) or (
            correction is not None and not correction.get("bypass_mode", False)
            and (batch.fields is None or "rollout_log_probs" in batch.fields))

    def _verl_step(self, batch: KVBatchMeta, metrics: dict) -> tuple[KVBatchMeta, float]:
        """verl's own advantage step, and its seconds (left out of factutil's time)."""
        started = time.perf_counter()
        return super()._compute_advantage(batch, metrics), time.perf_counter() - started

    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        """FactAgent's advantages for every group that can be scored, verl's GRPO for the rest.

        verl's own advantage step (its GRPO values, KL in the reward, rollout correction) runs
        first when it changes more than the advantages (:meth:`_verl_first`); otherwise only when
        a row keeps its values (padding, a group fallen back, a failure), since factutil
        overwrites every other row.
        Reads ``uid``, ``response_mask``, the reward (``rm_scores``, or ``token_level_rewards``
        with ``use_kl_in_reward``), ``extra_fields`` and, when a row keeps them, verl's
        ``advantages`` from TransferQueue;
        writes ``advantages`` and ``returns`` (equal, as verl's GRPO does; the actions placed on
        the mask the loop wrote, 0 wherever verl's rejection sampling zeroed it) and adds
        ``factutil/*`` metrics (``time_trainer_ms``: factutil's part, verl's step left out). A
        batch scored early
        (``score_early``) is used when its inputs are unchanged.
        Any failure keeps verl's values for the whole batch and sets
        ``factutil/batch_fallback`` to 1. Every ``report_every``-th step hands the scored batch
        to the report writer, which returns at once.
        """
        started = time.perf_counter()
        verl_done, layout = self._verl_first(batch), None
        if verl_done:
            # Rejection sampling may zero tokens of the mask: the actions are placed on the mask
            # the loop wrote, and verl's new mask then applies to every row, as in verl's GRPO.
            layout = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                                     select_fields=["response_mask"]).to_padded_tensor()
            layout = layout["response_mask"]
            batch, seconds = self._verl_step(batch, metrics)
            started += seconds
        step, result, failed = self.factutil_step, None, False
        try:
            inputs = self._factutil_inputs(batch, extra=False, layout=layout)
            scored = step.take([inputs.key()], lambda: self._factutil_score(batch, layout=layout))
            grpo = None
            if grpo_rows(scored, inputs.uids, inputs.is_padding).any():  # else not read at all
                if not verl_done:
                    (batch, seconds), verl_done = self._verl_step(batch, metrics), True
                    started += seconds
                grpo = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                                       select_fields=["advantages"]).to_padded_tensor()["advantages"]
            advantages = (with_grpo_fallback(scored, grpo, inputs.uids, inputs.is_padding)
                          * inputs.trained_mask.to(torch.float32))
            nested = response_to_nested(advantages, inputs.nested_mask)
            fields = TensorDict(
                {"advantages": nested, "returns": nested.clone()}, batch_size=len(batch.keys)
            )
            batch = tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields)
            metrics.update(scored.metrics)
            result = scored.result
        except Exception:
            logger.exception("factutil: the batch keeps verl's GRPO advantages")
            failed = True
        if failed and not verl_done:
            batch, seconds = self._verl_step(batch, metrics)
            started += seconds
        metrics.update(step.finish(result, started, failed=failed,
                                   step=getattr(self, "global_steps", None)))
        return batch
