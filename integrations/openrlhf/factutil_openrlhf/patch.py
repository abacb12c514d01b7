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
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from factutil.integration import (
    WORK_KEY,
    Unscorable,
    prepares_in_workers,
    scatter_to_spans,
    score_batch,
    trainer_rollout,
    warn_fallback,
)
from factutil_openrlhf.settings import PAYLOAD_KEY, as_config

logger = logging.getLogger("factutil.openrlhf")

PATCHED = "__factutil_patched__"
"""Attribute set on each patched method (its value: the original); guards against double wrapping."""

WHITENING_ESTIMATORS = ("gae", "reinforce", "reinforce_baseline")
"""Estimators whose advantages OpenRLHF whitens over the batch after computing them."""

METRIC_KEYS = (
    "factutil/skipped",
    "factutil/actions",
    "factutil/process_adv_abs",
    "factutil/clusters_per_group",
    "factutil/shaping_nonzero_share",
    "factutil/groups_uniform_share",
    "factutil/prepared_unshipped",
    "factutil/prepared_ignored",
    "factutil/prepared_other_device",
    "factutil/score_early_used",
    "factutil/time_s",
)
"""Per-sample floats added to ``Experience.info`` on every call (logged as actor metrics, mean
over samples). ``factutil/skipped`` is the warning metric: 1 on rows whose group kept OpenRLHF's
advantages unchanged. With ``prepare_in_workers``, ``factutil/prepared_unshipped`` counts the
batch's samples whose work did not come from the engine, ``factutil/prepared_ignored`` the work
items made for another config or embedder, or unreadable (the step computed those facts itself:
the advantages are the same), ``factutil/groups_uniform_share`` the share of the batch's groups
whose rollouts all scored the same (docs/method.md §3), ``factutil/prepared_other_device`` the
batch's facts whose vectors came from an engine on another kind of device than the trainer's
embedder (config ``prepared_device``).
``factutil/score_early_used`` is 1 when the batch was scored while OpenRLHF computed the
log-probs (config ``score_early``) and that result was used."""


class ProcessAdvantagePatch:
    """The state the patched ``compute_advantages_and_returns`` uses: config, clusterer, and
    the report writer (``FACTUTIL_REPORT_EVERY=N``: every N-th call, i.e. training step, writes
    the batch's HTML credit report to ``<--ckpt.output_dir>/factutil_reports/`` in a background
    thread; see :class:`factutil.report.ReportWriter`).

    Args:
        config: a ``factutil.FactUtilConfig``, a mapping of its fields, or None for the
            ``FACTUTIL_*`` environment (:func:`factutil_openrlhf.config_from_env`).

    Raises:
        factutil_openrlhf.SettingsError: bad ``FACTUTIL_*`` variables (None config).
        pydantic.ValidationError: a bad mapping.
    """

    def __init__(self, config: Any = None):
        self.config = as_config(config)
        self._clusterer = None
        self._warned: set[str] = set()
        self.steps = 0
        self.reports = None
        # score_early: one thread; the rows it scores and the future of their scoring.
        self._pool: ThreadPoolExecutor | None = None
        self._early: tuple[dict[tuple[int, int], dict[str, Any]], Future] | None = None

    def clusterer(self):
        """One clusterer for the whole run, so its state (an embedding cache) is reused."""
        if self._clusterer is None:
            from factutil.cluster import make_clusterer

            self._clusterer = make_clusterer(self.config)
        return self._clusterer

    def warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message)

    def start_early(self, maker: Any, experiences: Sequence[Any]) -> None:
        """Start scoring ``experiences`` in a background thread (config ``score_early``), before
        OpenRLHF computes their log-probs; :meth:`add_process_advantages` uses the result when
        the rows it is given are the same (sample indices, rewards, prompts, labels, the very
        payloads), else scores again. Nothing starts when no sample carries a payload or a
        reward is not known yet (a reward model scores during the log-probs). Never raises."""
        self._early = None
        if not self.config.score_early:
            return
        try:
            payloads = [experience.info.get(PAYLOAD_KEY) for experience in experiences]
            if all(payload is None for payload in payloads):
                return
            n = int(maker.strategy.args.rollout.n_samples_per_prompt)
            rows, groups = _collect_rows(experiences, payloads, n)
            if any(row["reward"] is None for row in rows.values()):
                return
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="factutil")
            self._early = (rows, self._pool.submit(self._score_groups, rows, groups))
        except Exception:
            logger.exception("factutil: could not start scoring early; the advantage step will")

    def _score_groups(self, rows: dict[tuple[int, int], dict[str, Any]],
                      groups: dict[int, list[tuple[int, int]]]) -> Any:
        """The core's scoring of the rows' groups (:func:`factutil.integration.score_batch`)."""
        work = None
        if prepares_in_workers(self.config):
            work = [row["payload"][WORK_KEY] for row in rows.values()
                    if isinstance(row["payload"], dict) and WORK_KEY in row["payload"]]
        return score_batch(
            sorted(groups),
            lambda group: _group_rollouts(group, groups[group], rows),
            self.config,
            clusterer=self.clusterer(),
            column="process_advantage",
            work=work,
        )

    def _early_batch(self, rows: dict[tuple[int, int], dict[str, Any]]) -> Any:
        """The batch scored early, when it scored exactly these rows; else None."""
        early, self._early = self._early, None
        if early is None:
            return None
        try:
            batch = early[1].result()
        except Exception:
            logger.exception("factutil: scoring early failed; scoring the batch again")
            return None
        fields = ("index", "reward", "prompt", "label")
        same = early[0].keys() == rows.keys() and all(
            all(early[0][key][name] == rows[key][name] for name in fields)
            and early[0][key]["payload"] is rows[key]["payload"]
            for key in rows
        )
        if not same:
            logger.warning("factutil: the batch changed after it was scored early; scoring it again")
            return None
        return batch

    def add_process_advantages(self, maker: Any, experiences: Sequence[Any], payloads: list[Any]) -> None:
        """Add omega * A_proc on each action's tokens of ``experiences`` (in place). Never raises.

        Args:
            maker: the ``RemoteExperienceMaker`` (its ``args`` give ``n_samples_per_prompt`` and
                the estimator).
            experiences: OpenRLHF ``Experience`` micro-batches after OpenRLHF's own
                ``compute_advantages_and_returns``: ``advantages`` and ``action_mask`` (B, T-1),
                ``index`` (B,), ``prompts``/``labels`` (B,), ``info`` of (B,) tensors.
            payloads: per experience, the popped ``info["factutil"]`` list (B payload dicts or
                None), or None when that experience had none.

        A group whose rows lack a valid payload, that fails the core's validation, whose call
        raises, or whose spans do not fit keeps OpenRLHF's advantages: its rows get
        ``factutil/skipped = 1`` and one warning is logged per call. omega = 0 leaves every
        advantage bit-identical.
        """
        started = time.perf_counter()
        self.steps += 1
        config = self.config
        stats = {key: [np.zeros(len(e.advantages)) for e in experiences] for key in METRIC_KEYS}
        batch_stats = dict.fromkeys(
            ("factutil/clusters_per_group", "factutil/shaping_nonzero_share",
             "factutil/groups_uniform_share", "factutil/prepared_unshipped", "factutil/prepared_ignored",
             "factutil/prepared_other_device", "factutil/score_early_used"),
            0.0,
        )
        skipped: dict[int, str] = {}
        deltas: dict[tuple[int, int], np.ndarray] = {}
        # Never crash training for the process term: any failure keeps OpenRLHF's advantages.
        try:
            rows, groups, result = self._score(
                maker, experiences, payloads, skipped, batch_stats, deltas
            )
        except Exception as error:
            logger.exception("factutil: process advantages failed; OpenRLHF's advantages kept")
            deltas.clear()
            for values in stats["factutil/skipped"]:
                values[:] = 1.0
            skipped = {}
            failure = f"all groups: {type(error).__name__}: {error}"
        else:
            failure = None
            # Only now, with every group's term computed, is any advantage touched.
            for (i, r), delta in deltas.items():
                values = rows[(i, r)]["values"]
                stats["factutil/actions"][i][r] = len(values)
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
            if result is not None and config.report_every:
                self._report(maker, result)
        warn_fallback(logger, skipped, "OpenRLHF's advantages", "factutil/skipped", every=failure)
        elapsed = time.perf_counter() - started
        for i, experience in enumerate(experiences):
            for key in METRIC_KEYS:
                values = stats[key][i]
                if key in batch_stats:
                    values[:] = batch_stats[key]
                elif key == "factutil/time_s":
                    values[:] = elapsed
                experience.info[key] = torch.tensor(values, dtype=torch.float32)


    def _report(self, maker: Any, result: Any) -> None:
        """Hand the step's result to the report writer (made on first use); never raises."""
        try:
            if self.reports is None:
                from factutil.report import ReportWriter

                ckpt = getattr(maker.strategy.args, "ckpt", None)
                folder = getattr(ckpt, "output_dir", None) or "."
                self.reports = ReportWriter.for_run(folder, self.config.report_every)
            self.reports.submit(result, self.steps)
        except Exception:  # noqa: BLE001 - a report must never fail a training step
            self.warn_once("report", "factutil: the credit report could not be started; "
                           "training goes on without it")

    def _score(
        self,
        maker: Any,
        experiences: Sequence[Any],
        payloads: list[Any],
        skipped: dict[int, str],
        batch_stats: dict[str, float],
        deltas: dict[tuple[int, int], np.ndarray],
    ) -> tuple[dict[tuple[int, int], dict[str, Any]], dict[int, list[tuple[int, int]]], Any]:
        """Group the rows, score them with the core, fill ``deltas`` (float32 (T-1,) per row),
        ``skipped`` (group -> reason) and ``batch_stats``. Touches no advantage. Returns the
        rows, the groups and the core's result (None when nothing was scored)."""
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
        rows, groups = _collect_rows(experiences, payloads, n)
        batch = self._early_batch(rows)
        batch_stats["factutil/score_early_used"] = float(batch is not None)
        if batch is None:
            batch = self._score_groups(rows, groups)
        skipped.update(batch.fallback)
        batch_stats["factutil/prepared_unshipped"] = float(batch.unshipped or 0)
        if batch.result is None:
            return rows, groups, None
        for key in ("clusters_per_group", "shaping_nonzero_share", "groups_uniform_share"):
            batch_stats[f"factutil/{key}"] = float(batch.result.metrics.get(key, 0.0))
        found = batch.result.metrics
        batch_stats["factutil/prepared_ignored"] = float(
            found.get("cluster_work_ignored", 0.0) + found.get("cluster_work_unreadable", 0.0))
        batch_stats["factutil/prepared_other_device"] = float(
            found.get("cluster_work_other_device", 0.0))
        deltas.update(
            _group_deltas(batch.values, rows, groups, skipped, experiences, self.config.omega)
        )
        return rows, groups, batch.result


def _collect_rows(
    experiences: Sequence[Any], payloads: list[Any], n: int
) -> tuple[dict[tuple[int, int], dict[str, Any]], dict[int, list[tuple[int, int]]]]:
    """Rows keyed by (experience, row) with their sample index, payload, prompt, label, reward;
    and the rows of each GRPO group (``index // n``), in sample-index order."""
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
        rewards = experience.info.get("reward")
        for r in range(batch):
            sample = int(index[r])
            reward = None
            if isinstance(rewards, torch.Tensor) and rewards.numel() == batch:
                reward = float(rewards[r])
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
        reward = row["reward"]
        rollouts.append(
            trainer_rollout(
                name=f"sample {row['index']}",
                uid=str(group),
                rollout_id=str(row["index"]),
                question=row["prompt"],
                golden_answers=row["label"],
                actions=row["payload"]["actions"],
                reward=reward if reward is not None and math.isfinite(reward) else None,
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
    if not isinstance(actions, list) or not isinstance(spans, list):
        return "payload lacks its actions or spans lists"
    if len(actions) != len(spans):
        return f"{len(actions)} actions but {len(spans)} spans"
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
        result = original(self, experiences)
        if any(present):
            same = (
                result is not None
                and len(result) == len(experiences)
                and all(a is b for a, b in zip(result, experiences))
            )
            if same:
                active().add_process_advantages(self, result, payloads)
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
