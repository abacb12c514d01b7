"""``FactUtilGRPOTrainer``: TRL's ``GRPOTrainer`` whose advantages carry FactAgent's process credit.

TRL (1.16) gives every token of a completion the same GRPO advantage A_out. This subclass lets
TRL compute it first, unchanged (its reward weights, ``scale_rewards``, unscorable rows), then
scores the batch's episodes with :func:`factutil.compute_process_advantages` and writes, on every
token of action *t* of a rollout (docs/method.md §5),

    A[i, token] = A_out[i] + omega * A_proc[i, t]

as a (B, T) tensor, which TRL's loss accepts from a subclass. Environment tokens (``env_mask``
0) are outside the loss and keep A_out. With ``omega = 0`` the tensor is A_out on every token and
the loss is TRL's own, bit for bit.

The batch comes from :class:`factutil_trl.FactAgentRollout` (any ``rollout_func`` whose
completions carry the same ``factutil`` payload works): the episodes of one question are the
``num_generations`` consecutive rows TRL normalises together; the outcome reward R of each is
TRL's reward (the weighted sum of the reward functions). A group that cannot be scored (a row
without a payload, no gold answers, a reward function that returned None, spans that do not fit,
a failed validation) keeps TRL's advantage, is counted in ``factutil/groups_fallback`` and named
in one warning per step; any other failure keeps TRL's advantages for the whole batch
(``factutil/batch_fallback``). Never NaN, never a crash.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import Any

import torch
from accelerate.utils import gather_object
from factutil.api import ProcessAdvantages
from factutil.config import FactUtilConfig, as_config
from factutil.integration import (
    BatchScore,
    TrainerStep,
    Unscorable,
    batch_metrics,
    checked_spans,
    scatter_to_spans,
    trainer_rollout,
    warn_fallback,
)
from factutil.metrics import gold_key
from trl import GRPOTrainer

from factutil_trl.rollout import PAYLOAD_KEY

logger = logging.getLogger("factutil_trl")


class FactUtilGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer with A = A_out + Ω·A_proc on each action's tokens (docs/method.md §5).

    Args:
        *args, **kwargs: ``GRPOTrainer``'s (``model``, ``reward_funcs``, ``args``,
            ``train_dataset``, ``processing_class``, ``rollout_func``, ...).
        factutil_config: the method's parameters: a :class:`factutil.FactUtilConfig`, a mapping
            of its fields, or None for the defaults. ``report_every=N`` writes every N-th
            step's HTML credit report to ``<args.output_dir>/factutil_reports/``.

    Attributes:
        factutil_config: the validated config.
        factutil_step: the run's :class:`factutil.integration.TrainerStep` (clusterer, report
            writer, step metrics).
        factutil_result: the last scored batch (:class:`factutil.ProcessAdvantages`), None
            before the first or when the last failed: its clusters, utilities and per-action
            columns.

    Raises:
        factutil.config.ConfigError: a bad ``factutil_config`` (one line per problem naming
            the field and value), raised before TRL builds anything; TypeError: neither a config nor a mapping.
    """

    def __init__(
        self,
        *args: Any,
        factutil_config: FactUtilConfig | Mapping[str, Any] | None = None,
        **kwargs: Any,
    ):
        self.factutil_config = as_config(factutil_config)
        self.factutil_result: ProcessAdvantages | None = None
        self._factutil_rewards: torch.Tensor | None = None
        super().__init__(*args, **kwargs)
        self.factutil_step = TrainerStep(self.factutil_config, self.args.output_dir or ".", logger)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """TRL's rewards, unchanged; kept so the process credit reads the same R."""
        rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        self._factutil_rewards = rewards_per_func
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        """TRL's batch, then its ``advantages`` replaced by the (B, T) FactAgent advantages."""
        output = super()._generate_and_score_completions(inputs)
        self._add_process_advantages(inputs, output)
        return output

    def _add_process_advantages(self, inputs: list[dict[str, Any]], output: dict[str, Any]) -> None:
        """Replace ``output["advantages"]`` (B,) by float (B, T) A_out + Ω·A_proc; log metrics.

        Never raises: on any failure the advantages stay TRL's.
        """
        mode = "train" if self.model.training else "eval"
        started = time.perf_counter()
        metrics: dict[str, float] = {}
        self.factutil_result, failed = None, False
        try:
            advantages, batch = self._factutil_advantages(inputs, output, mode)
        except Exception:
            logger.exception(
                "factutil: process advantages failed; the batch keeps TRL's advantages"
            )
            failed = True
        else:
            output["advantages"] = advantages
            self.factutil_result = batch.result
            metrics.update(batch_metrics(batch))
            warn_fallback(logger, batch.fallback, "TRL's advantages")
        report = mode == "train" and self.accelerator.is_main_process
        metrics.update(self.factutil_step.finish(
            self.factutil_result if report else None, started,
            failed=failed, step=self.state.global_step + 1))
        for name, value in metrics.items():
            self._metrics[mode][name].append(value if math.isfinite(value) else 0.0)

    def _factutil_advantages(
        self, inputs: list[dict[str, Any]], output: dict[str, Any], mode: str
    ) -> tuple[torch.Tensor, BatchScore[int]]:
        """(float (B, T) advantages, the batch's score: the core's result, group -> fallback
        reason)."""
        config = self.factutil_config
        trl_advantages = output["advantages"]
        mask = output["completion_mask"]
        if "tool_mask" in output:
            mask = mask * output["tool_mask"]
        local, width = mask.shape
        if trl_advantages.shape != (local,):
            raise ValueError(
                f"TRL advantages of shape {tuple(trl_advantages.shape)}, expected ({local},)"
            )
        # The groups TRL normalised span processes: score the whole batch in every process.
        payloads = gather_object([row.get(PAYLOAD_KEY) for row in inputs])
        # each question's gold answers: its column of gold_key (every adapter's rule)
        golds = gather_object([row[key] if (key := gold_key(row)) else None for row in inputs])
        rewards = self._factutil_rewards
        if rewards is None or rewards.shape[0] != len(payloads):
            raise ValueError("TRL's rewards of this batch were not seen")
        total = (rewards * self.reward_weights.to(rewards.device).unsqueeze(0)).nansum(dim=1)
        total[torch.isnan(rewards).all(dim=1)] = torch.nan
        size = self.num_generations if mode == "train" else self.num_generations_eval
        if len(payloads) % size:
            raise ValueError(f"{len(payloads)} rows are not whole groups of {size}")
        groups = len(payloads) // size

        batch = self.factutil_step.score(
            range(groups),
            lambda group: [
                _rollout(row, group, payloads[row], golds[row], float(total[row]))
                for row in range(group * size, (group + 1) * size)
            ],
            column="process_advantage",
        )
        if batch.error is not None:
            raise batch.error
        values, fallback = batch.values, batch.fallback

        advantages = trl_advantages.detach().unsqueeze(1).expand(local, width).clone()
        if config.omega == 0.0:
            return advantages, batch
        offset = self.accelerator.process_index * local
        token_mask = mask.detach().cpu().numpy()
        # each row's length (0 for a row mask_truncated_completions took out of the loss)
        lengths = output["completion_mask"].sum(dim=1).tolist()
        model = output.get("tool_mask")
        model = None if model is None else model.detach().cpu().numpy()
        # each process sees its own rows' tokens; a group whose rows span processes falls back whole
        misfits = gather_object([
            None if (offset + i) // size in fallback else _misfit(
                payloads[offset + i]["spans"], lengths[i], None if model is None else model[i])
            for i in range(local)])
        for row, misfit in enumerate(misfits):
            if misfit is not None:
                fallback.setdefault(row // size, f"row {row}: {misfit}")
        for i in range(local):
            row = offset + i
            group = row // size
            if group in fallback:
                continue
            process = values.get((str(group), str(row)))
            if process is None:
                fallback[group] = f"row {row} was not scored"
                continue
            delta = scatter_to_spans(
                config.omega * process, payloads[row]["spans"], width, response_mask=token_mask[i]
            )
            advantages[i] += torch.from_numpy(delta).to(advantages.device, advantages.dtype)
        # A group found unscorable above while rows of it were already written: undo them.
        for i in range(local):
            if (offset + i) // size in fallback:
                advantages[i] = trl_advantages[i]
        return advantages, batch


def _misfit(spans: list[list[int]], length: int, model: Any) -> str | None:
    """Why a row's action spans do not fit its completion of ``length`` tokens (0: a row out of
    the loss, not checked), or None: one ends past it, or holds no token the model wrote
    (``model``: the row's ``env_mask``, None without one): a payload counted otherwise."""
    for start, end in spans if length else ():
        if end > length:
            return f"span [{start}, {end}) ends past its {length}-token completion"
        if model is not None and end > start and not model[start:end].any():
            return f"span [{start}, {end}) holds no token the model wrote (env_mask 0)"
    return None


def _rollout(row: int, group: int, payload: Any, golds: Any, reward: float) -> dict[str, Any]:
    """One row as a docs/method.md §8 rollout (uid = its group, rollout_id = its row); raises
    Unscorable."""
    if not isinstance(payload, Mapping):
        raise Unscorable(
            f"row {row} has no {PAYLOAD_KEY!r} payload (is the rollout_func FactAgentRollout or "
            "SearchR1Rollout?)"
        )
    actions = payload.get("actions")
    if not isinstance(actions, list):
        raise Unscorable(f"row {row}: the payload has no actions list")
    try:
        checked_spans(payload.get("spans"), len(actions))
    except ValueError as error:
        raise Unscorable(f"row {row}: {error}") from None
    return trainer_rollout(
        name=f"row {row}",
        uid=str(group),
        rollout_id=str(row),
        question=payload.get("question"),
        golden_answers=golds,
        actions=actions,
        reward=reward,
    )
