"""The two OpenRLHF 0.11 patches: carry the payload, then add omega * A_proc on action tokens.

Imported only when OpenRLHF's experience modules are (see :func:`factutil_openrlhf.install`).
No method logic lives here (the adapters stay thin): rows are turned into factutil rollouts, one core call
(:func:`factutil.compute_process_advantages`) scores them, and the core's span scatter
(:func:`factutil.advantages.scatter_to_spans`) puts each action's value on its tokens.

Layout facts of OpenRLHF 0.11.2 this relies on (``trainer/ppo_utils/samples_generator.py`` and
``experience_maker.py``):

- ``action_ranges`` are ``[start, end)`` token positions in ``sequences``; ``action_mask`` and
  ``advantages`` are ``(B, T - 1)`` and index *i* is the prediction of token *i + 1*, so a span
  becomes ``[start - 1, end - 1)`` there; truncation to ``--data.max_len`` and the right padding of
  micro-batches are zeros of ``action_mask``.
- ``experience.index[r]`` is the row's position in the rollout batch and the GRPO group is
  ``index // n_samples_per_prompt`` (``rewards.reshape(-1, n_samples_per_prompt)``).
- ``info`` values are merged across samples by list concatenation (``Experience._merge_item``) and
  everything left in ``info`` becomes a logged actor metric, so the payload is stored as a
  one-item list on every sample and popped before OpenRLHF's own advantage code runs.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

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
from factutil.preparer import WORK_KEY, prepares_in_workers
from factutil_openrlhf.settings import PAYLOAD_KEY, as_config

logger = logging.getLogger("factutil.openrlhf")

PATCHED = "__factutil_patched__"
"""Attribute set on each patched method (its value: the original); guards against double wrapping."""

WHITENING_ESTIMATORS = ("gae", "reinforce", "reinforce_baseline")
"""Estimators whose advantages OpenRLHF whitens over the batch after computing them."""

METRIC_KEYS = ("factutil/skipped", "factutil/process_adv_abs")
"""Per-sample floats added to ``Experience.info`` on every call (logged as actor metrics, mean
over samples): 1 on rows whose group kept OpenRLHF's advantages, and the row's mean
|omega * A_proc|. The step's ``factutil/*`` metrics (:func:`factutil.integration.batch_metrics`
and :meth:`factutil.integration.TrainerStep.finish`, the names verl and TRL log) are added too,
the same value on every sample."""


class ProcessAdvantagePatch:
    """The state the patched methods use: the run's :class:`factutil.integration.TrainerStep`
    (config, clusterer, early scoring, the report writer: ``FACTUTIL_REPORT_EVERY=N`` writes
    every N-th step's HTML credit report to ``<--ckpt.output_dir>/factutil_reports/``).

    Args:
        config: a ``factutil.FactUtilConfig``, a mapping of its fields, or None for the
            ``FACTUTIL_*`` environment (:func:`factutil_openrlhf.config_from_env`).

    Raises:
        factutil_openrlhf.SettingsError: bad ``FACTUTIL_*`` variables (None config).
        factutil.config.ConfigError: a bad mapping.
    """

    def __init__(self, config: Any = None):
        self.config = as_config(config)
        self.step = TrainerStep(self.config, log=logger)
        self._warned: set[str] = set()

    def warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message)

    def start_early(self, maker: Any, experiences: Sequence[Any]) -> None:
        """Start scoring ``experiences`` in the step's background thread (config
        ``score_early``), before OpenRLHF computes their log-probs, keyed by their rows (sample
        indices, rewards, prompts, labels, payloads): :meth:`add_process_advantages` takes that
        score when its rows are the same. Nothing starts when no sample carries a payload or a
        reward is not known yet (a reward model scores during the log-probs) or NaN (never
        equal to itself: the key would never match). Never raises."""
        if not self.config.score_early:
            return
        try:
            payloads = [experience.info.get(PAYLOAD_KEY) for experience in experiences]
            if all(payload is None for payload in payloads):
                return
            n = int(maker.strategy.args.rollout.n_samples_per_prompt)
            rewards = [experience.info.get("reward") for experience in experiences]
            rows, groups = _collect_rows(experiences, payloads, rewards, n)
            if any(row["reward"] is None or math.isnan(row["reward"]) for row in rows.values()):
                return
            self.step.start(_rows_key(rows), lambda: self._score_groups(rows, groups))
        except Exception:
            logger.exception("factutil: could not start scoring early; the advantage step will")

    def _score_groups(self, rows: dict[tuple[int, int], dict[str, Any]],
                      groups: dict[int, list[tuple[int, int]]]) -> BatchScore[int]:
        """The core's scoring of the rows' groups (:meth:`TrainerStep.score`)."""
        work = None
        if prepares_in_workers(self.config):
            work = [row["payload"][WORK_KEY] for row in rows.values()
                    if isinstance(row["payload"], dict) and WORK_KEY in row["payload"]]
        return self.step.score(
            sorted(groups),
            lambda group: _group_rollouts(group, groups[group], rows),
            column="process_advantage",
            work=work,
        )

    def add_process_advantages(self, maker: Any, experiences: Sequence[Any], payloads: list[Any],
                               rewards: list[Any]) -> None:
        """Add omega * A_proc on each action's tokens of ``experiences`` (in place). Never raises.

        Args:
            maker: the ``RemoteExperienceMaker`` (its ``args`` give ``n_samples_per_prompt`` and
                the estimator).
            experiences: OpenRLHF ``Experience`` micro-batches after OpenRLHF's own
                ``compute_advantages_and_returns``: ``advantages`` and ``action_mask`` (B, T-1),
                ``index`` (B,), ``prompts``/``labels`` (B,), ``info`` of (B,) tensors.
            payloads: per experience, the popped ``info["factutil"]`` list (B payload dicts or
                None), or None when that experience had none.
            rewards: per experience, its ``info["reward"]`` (B,) as the agent gave it, read
                before OpenRLHF's length penalties rewrite it (the early score read the same).

        A group whose rows lack a valid payload, that fails the core's validation, whose call
        raises, or whose spans do not fit keeps OpenRLHF's advantages: its rows get
        ``factutil/skipped = 1`` and one warning is logged per call. omega = 0 leaves every
        advantage bit-identical.
        """
        started = time.perf_counter()
        config = self.config
        stats = {key: [np.zeros(len(e.advantages)) for e in experiences] for key in METRIC_KEYS}
        metrics: dict[str, float] = {}
        result = failure = None
        # Never crash training for the process term: any failure keeps OpenRLHF's advantages.
        try:
            rows, groups, batch, deltas = self._score(maker, experiences, payloads, rewards)
        except Exception as error:
            logger.exception("factutil: process advantages failed; OpenRLHF's advantages kept")
            for values in stats["factutil/skipped"]:
                values[:] = 1.0
            failure, skipped = f"all groups: {type(error).__name__}: {error}", {}
        else:
            skipped, result = batch.fallback, batch.result
            # Only now, with every group's term computed, is any advantage touched.
            for (i, r), delta in deltas.items():
                values = rows[(i, r)]["values"]
                stats["factutil/process_adv_abs"][i][r] = (
                    float(np.mean(np.abs(values))) if len(values) else 0.0
                )
                if config.omega != 0.0:
                    advantages = experiences[i].advantages
                    advantages[r] += torch.from_numpy(delta).to(
                        device=advantages.device, dtype=advantages.dtype
                    )
            for group, keys in groups.items():
                if group in skipped:
                    for i, r in keys:
                        stats["factutil/skipped"][i][r] = 1.0
            metrics = batch_metrics(batch)
        warn_fallback(logger, skipped, "OpenRLHF's advantages", every=failure)
        if config.report_every and self.step.reports is None:
            ckpt = getattr(maker.strategy.args, "ckpt", None)
            self.step.run_folder = getattr(ckpt, "output_dir", None) or "."
        metrics.update(self.step.finish(result, started, failed=failure is not None))
        for i, experience in enumerate(experiences):
            rows_of = len(experience.advantages)
            for key in METRIC_KEYS:
                experience.info[key] = torch.tensor(stats[key][i], dtype=torch.float32)
            for key, value in metrics.items():
                experience.info[key] = torch.full((rows_of,), value, dtype=torch.float32)

    def _score(self, maker: Any, experiences: Sequence[Any], payloads: list[Any],
               rewards: list[Any]) -> tuple[
        dict[tuple[int, int], dict[str, Any]], dict[int, list[tuple[int, int]]],
        BatchScore[int], dict[tuple[int, int], np.ndarray],
    ]:
        """Group the rows and score them (the early score when the rows are those it read);
        the rows, the groups, the score (its ``fallback`` completed with the groups whose spans
        do not fit) and each row's float32 (T-1,) term. Touches no advantage."""
        args = maker.strategy.args
        n = int(args.rollout.n_samples_per_prompt)
        estimator = getattr(maker, "advantage_estimator", None) or args.algo.advantage.estimator
        if estimator in WHITENING_ESTIMATORS:
            self.warn_once(
                "whitening",
                f"factutil: --algo.advantage.estimator {estimator} whitens advantages over the "
                "batch; omega * A_proc is added after that whitening, so its scale is relative "
                "to unit-variance advantages (group_norm, rloo or dr_grpo keep GRPO's scale)",
            )
        rows, groups = _collect_rows(experiences, payloads, rewards, n)
        batch = self.step.take(_rows_key(rows), lambda: self._score_groups(rows, groups))
        deltas = {}
        if batch.result is not None:
            deltas = _group_deltas(batch.values, rows, groups, batch.fallback, experiences,
                                   self.config.omega)
        return rows, groups, batch, deltas


def _rows_key(rows: dict[tuple[int, int], dict[str, Any]]) -> tuple[Any, ...]:
    """What an early score read of the rows: it stands for them while this is unchanged."""
    fields = ("index", "reward", "prompt", "label", "payload")
    return tuple((key, *(row[name] for name in fields)) for key, row in rows.items())


def _collect_rows(
    experiences: Sequence[Any], payloads: list[Any], rewards: list[Any], n: int
) -> tuple[dict[tuple[int, int], dict[str, Any]], dict[int, list[tuple[int, int]]]]:
    """Rows keyed by (experience, row) with their sample index, payload, prompt, label, reward
    (``rewards[i]``: experience i's (B,) rewards); and the rows of each GRPO group
    (``index // n``), in sample-index order."""
    rows: dict[tuple[int, int], dict[str, Any]] = {}
    groups: dict[int, list[tuple[int, int]]] = {}
    for i, experience in enumerate(experiences):
        # before OpenRLHF's advantages exist (scoring early), the rows are the sample indices
        batch = len(experience.advantages if experience.advantages is not None else experience.index)
        index = experience.index
        if index is None or len(index) != batch:
            raise ValueError(f"experience {i} has index {index!r} for {batch} rows")
        payload_list = payloads[i]
        if not isinstance(payload_list, list) or len(payload_list) != batch:
            payload_list = [None] * batch
        given = rewards[i]
        for r in range(batch):
            sample = int(index[r])
            reward = None
            if isinstance(given, torch.Tensor) and given.numel() == batch:
                reward = float(given[r])
            rows[(i, r)] = {
                "index": sample,
                "payload": payload_list[r],
                "prompt": experience.prompts[r] if r < len(experience.prompts) else "",
                "label": experience.labels[r] if r < len(experience.labels) else None,
                "reward": reward,
            }
            groups.setdefault(sample // n, []).append((i, r))
    for keys in groups.values():
        keys.sort(key=lambda key: rows[key]["index"])
    return rows, groups


def _group_rollouts(
    group: int,
    keys: list[tuple[int, int]],
    rows: dict[tuple[int, int], dict[str, Any]],
) -> list[dict[str, Any]]:
    """The group's samples as factutil rollouts (uid = the GRPO group, rollout_id = the sample
    index); raises Unscorable for a sample whose payload is missing or malformed."""
    rollouts = []
    for key in keys:
        row = rows[key]
        problem = _payload_problem(row["payload"])
        if problem is not None:
            raise Unscorable(f"sample {row['index']}: {problem}")
        rollouts.append(
            trainer_rollout(
                name=f"sample {row['index']}",
                uid=str(group),
                rollout_id=str(row["index"]),
                question=row["prompt"],
                golden_answers=row["label"],
                actions=row["payload"]["actions"],
                reward=row["reward"],  # None: the core's; NaN: Unscorable, as in verl and TRL
            )
        )
    return rollouts


def _payload_problem(payload: Any) -> str | None:
    if payload is None:
        return (
            "no factutil payload (is the agent file's AgentExecutor made with "
            "factutil_openrlhf.make_executor?)"
        )
    if not isinstance(payload, dict):
        return f"payload is a {type(payload).__name__}, not a dict"
    if payload.get("error"):
        return f"executor: {payload['error']}"
    actions, spans = payload.get("actions"), payload.get("spans")
    if not isinstance(actions, list):
        return "payload lacks its actions list"
    try:  # any integer out of a token position's range is this sample's problem alone
        checked_spans(spans, len(actions))
    except ValueError as error:
        return str(error)
    return None


def _group_deltas(
    per_rollout: dict[tuple[str, str], np.ndarray],
    rows: dict[tuple[int, int], dict[str, Any]],
    groups: dict[int, list[tuple[int, int]]],
    skipped: dict[int, str],
    experiences: Sequence[Any],
    omega: float,
) -> dict[tuple[int, int], np.ndarray]:
    """Per row, the float32 (T-1,) term omega * A_proc on its action spans (``per_rollout``:
    ``(group, sample index)`` -> A_proc per action); a group whose spans do not fit is added to
    ``skipped`` and gets none."""
    deltas = {}
    for group, keys in sorted(groups.items()):
        if group in skipped:
            continue
        found = {}
        try:
            for key in keys:
                i, r = key
                row = rows[key]
                process = per_rollout.get((str(group), str(row["index"])))
                if process is None:
                    raise ValueError(f"sample {row['index']} was not scored")
                values = omega * np.asarray(process, dtype=np.float64)
                # action_mask/advantages index i predicts token i + 1.
                spans = np.asarray(row["payload"]["spans"], dtype=np.int64).reshape(-1, 2) - 1
                mask = experiences[i].action_mask[r].detach().cpu().numpy()
                length = experiences[i].advantages.shape[1]
                found[key] = scatter_to_spans(values, spans, length, response_mask=mask)
                row["values"] = values
        except (ValueError, TypeError, IndexError) as error:
            skipped[group] = f"spans do not fit: {error}"
            continue
        deltas.update(found)
    return deltas


_active: ProcessAdvantagePatch | None = None


def configure(config: Any = None) -> ProcessAdvantagePatch:
    """Set the config the patched methods use (see :class:`ProcessAdvantagePatch`); returns it."""
    global _active
    _active = ProcessAdvantagePatch(config)
    return _active


def active() -> ProcessAdvantagePatch:
    """The current :class:`ProcessAdvantagePatch`, built from the environment on first use."""
    return _active if _active is not None else configure(None)


def _method_to_wrap(module: Any, class_name: str, method_name: str) -> tuple[Any, Any]:
    """``(cls, method)`` to wrap, or ``(cls, None)`` when the method is already patched.

    Raises:
        RuntimeError: the class or method is missing (an OpenRLHF version this adapter does not
            know); training must not run silently without the process term.
    """
    cls = getattr(module, class_name, None)
    original = getattr(cls, method_name, None)
    if original is None:
        raise RuntimeError(
            f"factutil_openrlhf: {module.__name__}.{class_name}.{method_name} not found; this "
            "adapter supports OpenRLHF 0.11"
        )
    return cls, None if getattr(original, PATCHED, None) is not None else original


def patch_samples_generator(module: Any) -> None:
    """Wrap ``SamplesGenerator._process_response_into_experience`` of OpenRLHF 0.11.

    The executor's ``response["factutil"]`` (or None) goes into ``experience.info["factutil"]``
    as a one-item list on every sample, so rows stay aligned when samples are concatenated.

    Raises:
        RuntimeError: the module has no such method (an OpenRLHF version this adapter does not
            know); training must not run silently without the process term.
    """
    cls, original = _method_to_wrap(module, "SamplesGenerator", "_process_response_into_experience")
    if original is None:
        return

    @functools.wraps(original)
    def _process_response_into_experience(self, response, **generate_kwargs):
        experience = original(self, response, **generate_kwargs)
        payload = response.get(PAYLOAD_KEY) if isinstance(response, dict) else None
        experience.info[PAYLOAD_KEY] = [payload]
        return experience

    setattr(_process_response_into_experience, PATCHED, original)
    cls._process_response_into_experience = _process_response_into_experience


def patch_experience_maker(module: Any) -> None:
    """Wrap ``RemoteExperienceMaker.compute_advantages_and_returns`` of OpenRLHF 0.11 (docs/method.md §5).

    The payloads are popped from ``info`` first (so they never reach metrics or the actors),
    OpenRLHF's own method runs unchanged, then
    :meth:`ProcessAdvantagePatch.add_process_advantages` adds omega * A_proc. When no sample
    carries the ``factutil`` key (the samples generator is not patched) nothing else happens.
    ``make_experience`` is wrapped too, to start the scoring early (config ``score_early``).

    Raises:
        RuntimeError: the method is missing (see :func:`patch_samples_generator`).
    """
    _wrap_make_experience(module)
    cls, original = _method_to_wrap(module, "RemoteExperienceMaker", "compute_advantages_and_returns")
    if original is None:
        return

    @functools.wraps(original)
    def compute_advantages_and_returns(self, experiences):
        present = [PAYLOAD_KEY in experience.info for experience in experiences]
        payloads = [experience.info.pop(PAYLOAD_KEY, None) for experience in experiences]
        # the agent's rewards: OpenRLHF's length penalties change them in the call (in place
        # where info["reward"] is the rewards tensor itself, as a reward model's is)
        rewards = [reward.clone() if isinstance(reward := experience.info.get("reward"), torch.Tensor)
                   else reward for experience in experiences]
        result = original(self, experiences)
        if any(present):
            same = (
                result is not None
                and len(result) == len(experiences)
                and all(a is b for a, b in zip(result, experiences))
            )
            if same:
                active().add_process_advantages(self, result, payloads, rewards)
            else:
                logger.warning(
                    "factutil: compute_advantages_and_returns returned other experiences than it "
                    "was given; OpenRLHF's advantages kept"
                )
        return result

    setattr(compute_advantages_and_returns, PATCHED, original)
    cls.compute_advantages_and_returns = compute_advantages_and_returns


def _wrap_make_experience(module: Any) -> None:
    """Wrap ``RemoteExperienceMaker.make_experience``: the batch's scoring starts first, in a
    background thread (:meth:`ProcessAdvantagePatch.start_early`), so it runs while OpenRLHF
    waits on the actors' log-probs."""
    cls, original_make = _method_to_wrap(module, "RemoteExperienceMaker", "make_experience")
    if original_make is None:
        return

    @functools.wraps(original_make)
    def make_experience(self, samples_list):
        active().start_early(self, samples_list)  # scores while the actors compute log-probs
        return original_make(self, samples_list)

    setattr(make_experience, PATCHED, original_make)
    cls.make_experience = make_experience
