"""The ``factutil`` trainer mode: verl's sync V1 trainer with FactAgent advantages (docs/method.md §5).

Select it with ``trainer.v1.trainer_mode=factutil`` (and ``algorithm.adv_estimator=grpo``). It is
:class:`verl.trainer.ppo.v1.PPOTrainerSync` with one override, :meth:`FactUtilTrainer._compute_advantage`:
verl computes its own GRPO advantages first (KL-in-reward and rollout correction included), then
the rows of each group are rebuilt into factutil rollouts, scored by
:func:`factutil.compute_process_advantages` and written back as ``advantages`` and ``returns``.
Groups that cannot be scored keep verl's GRPO values (see :mod:`factutil_verl.advantage`).
With ``+algorithm.factutil.report_every=N`` the HTML credit report of every N-th step's batch is
written to ``<trainer.default_local_dir>/factutil_reports/step_NNNNNN.html`` by
:class:`factutil.report.ReportWriter` (a background thread; a failed report never fails a step).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import transfer_queue as tq
from factutil.cluster import Clusterer, make_clusterer
from factutil.report import ReportWriter
from omegaconf import DictConfig
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.workers.utils.padding import response_to_nested

from factutil_verl.advantage import compute_factagent_advantages
from factutil_verl.config import FactUtilConfigError, factutil_config_from_verl

logger = logging.getLogger("factutil_verl")

TRAINER_MODE = "factutil"


def _as_list(value: Any) -> list[Any]:
    """A TransferQueue non-tensor column (NonTensorStack, LinkedList, array) as a plain list."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    return list(value)


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
        self.factutil_clusterer: Clusterer | None = None
        self.factutil_reports = ReportWriter.for_run(
            str(config.trainer.get("default_local_dir", ".")), self.factutil_config.report_every
        )
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

    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        """verl's GRPO advantages, then FactAgent's for every group that can be scored.

        Reads ``uid``, ``response_mask``, the reward (``rm_scores``, or ``token_level_rewards``
        with ``use_kl_in_reward``), ``extra_fields`` and verl's ``advantages`` from TransferQueue;
        writes ``advantages`` and ``returns`` (equal, as verl's GRPO does) and adds ``factutil/*``
        metrics. Any failure keeps verl's values for the whole batch and sets
        ``factutil/batch_fallback`` to 1. Every ``report_every``-th step hands the scored batch
        to the report writer, which returns at once.
        """
        batch = super()._compute_advantage(batch, metrics)
        started = time.perf_counter()
        scored = None
        try:
            reward_field = (
                "token_level_rewards" if self.config.algorithm.use_kl_in_reward else "rm_scores"
            )
            data = tq.kv_batch_get(
                keys=batch.keys,
                partition_id=batch.partition_id,
                select_fields=["uid", "response_mask", reward_field, "advantages", "extra_fields"],
            )
            response_mask = data["response_mask"]
            uids = [str(uid) for uid in _as_list(data.pop("uid"))]
            extra_fields = _as_list(data.pop("extra_fields"))
            padded = data.to_padded_tensor()
            if self.factutil_clusterer is None:
                self.factutil_clusterer = make_clusterer(self.factutil_config)
            tags = list(batch.tags) if batch.tags else [{}] * len(batch.keys)
            result = compute_factagent_advantages(
                keys=list(batch.keys),
                uids=uids,
                extra_fields=extra_fields,
                response_mask=padded["response_mask"],
                token_level_rewards=padded[reward_field],
                grpo_advantages=padded["advantages"],
                config=self.factutil_config,
                clusterer=self.factutil_clusterer,
                is_padding=[bool(tag.get("is_padding", False)) for tag in tags],
            )
            nested = response_to_nested(result.advantages, response_mask)
            fields = TensorDict(
                {"advantages": nested, "returns": nested.clone()}, batch_size=len(batch.keys)
            )
            batch = tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields)
            metrics.update(result.metrics)
            metrics["factutil/batch_fallback"] = 0.0
            scored = result.result
        except Exception:
            logger.exception("factutil: the batch keeps verl's GRPO advantages")
            metrics["factutil/batch_fallback"] = 1.0
        if scored is not None and self.factutil_reports.every:
            self.factutil_reports.submit(scored, getattr(self, "global_steps", 0))
            metrics["factutil/report_failures"] = float(self.factutil_reports.failures)
        metrics["factutil/time_trainer_ms"] = 1000.0 * (time.perf_counter() - started)
        return batch
