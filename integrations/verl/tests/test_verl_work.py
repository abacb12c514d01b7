"""Per-fact work from the agent-loop workers (``prepare_in_workers``): the rows' work goes to the
core, which gives the same advantages bit for bit; missing, unreadable or foreign work costs
only time, never a group's advantages."""

from __future__ import annotations

import copy

import numpy as np
import torch
from factutil import FactUtilConfig
from factutil.cluster import SemanticClusterer
from factutil.embed import l2_normalize
from factutil.preparer import WORK_KEY, FactPreparer
from factutil.schema import Rollout
from factutil.workers import work_bytes

from factutil_verl.advantage import compute_factagent_advantages

SEMANTIC = FactUtilConfig(mode="semantic")


class Letters:
    """A cheap deterministic embedder: letter counts of each text."""

    name = "test:letters"

    def encode(self, texts: list[str]) -> np.ndarray:
        rows = [[text.lower().count(c) + 1e-3 for c in "abcdefghijklmnopqrstuvwxyz"]
                for text in texts]
        return l2_normalize(np.array(rows, dtype=np.float32).reshape(len(texts), 26))


def with_work(rows, config, workers=2):
    """The rows' extra fields as the factagent loops of ``workers`` workers write them: each
    trajectory's new facts' work on its last row, nothing when it has no new fact."""
    preparers = [FactPreparer(config, clusterer=SemanticClusterer(config, embedder=Letters()))
                 for _ in range(workers)]
    extras = copy.deepcopy(rows.extra_fields)
    for index, line in enumerate(rows.lines):
        rollout = Rollout.model_validate(line)
        last = rows.row_of_action[(rollout.uid, rollout.rollout_id, len(rollout.actions) - 1)]
        work = preparers[index * workers // len(rows.lines)](rollout.actions)
        if len(work["parts"]):
            extras[last]["factutil"][WORK_KEY] = work
    return extras


def advantages(rows, config, extras):
    return compute_factagent_advantages(
        keys=rows.keys, uids=rows.uids, extra_fields=extras, response_mask=rows.response_mask,
        token_level_rewards=rows.rm_scores, grpo_advantages=torch.zeros(rows.response_mask.shape),
        config=config, clusterer=SemanticClusterer(config, embedder=Letters()),
    )


def test_workers_work_gives_the_same_advantages_bit_for_bit(sample_rows):
    alone = advantages(sample_rows, SEMANTIC.model_copy(update={"prepare_in_workers": False}),
                       sample_rows.extra_fields)
    extras = with_work(sample_rows, SEMANTIC)
    given = advantages(sample_rows, SEMANTIC, extras)
    assert alone.fallback == given.fallback == {}
    assert torch.equal(alone.advantages, given.advantages)
    carried = [info["factutil"][WORK_KEY] for info in extras if WORK_KEY in info["factutil"]]
    assert given.metrics["factutil/prepared_shipped"] == len(carried) > 0
    assert given.metrics["factutil/prepared_unshipped"] == 0.0
    assert given.metrics["factutil/cluster_work_facts"] == given.metrics["factutil/cluster_facts"]
    assert given.metrics["factutil/cluster_cache_misses"] == 0.0  # nothing embedded by the step
    assert alone.metrics["factutil/cluster_cache_misses"] > 0
    assert "factutil/prepared_shipped" not in alone.metrics  # off: no work expected


def test_missing_damaged_or_foreign_work_costs_no_group(sample_rows):
    alone = advantages(sample_rows, SEMANTIC.model_copy(update={"prepare_in_workers": False}),
                       sample_rows.extra_fields)
    extras = with_work(sample_rows, SEMANTIC)
    carrying = [info["factutil"] for info in extras if WORK_KEY in info["factutil"]]
    carrying[0][WORK_KEY] = None  # the worker failed
    carrying[1][WORK_KEY] = work_bytes(carrying[1][WORK_KEY])[:-40]  # damaged bytes
    other = SEMANTIC.model_copy(update={"sim_threshold": 0.5})
    carrying[2][WORK_KEY] = FactPreparer(other, clusterer=SemanticClusterer(
        other, embedder=Letters()))([{"action": "assert", "triples": [["a", "b", "c"]]}])
    given = advantages(sample_rows, SEMANTIC, extras)
    assert given.fallback == {}
    assert torch.equal(alone.advantages, given.advantages)
    assert given.metrics["factutil/prepared_unshipped"] == 1.0
    assert given.metrics["factutil/cluster_work_unreadable"] == 1.0
    assert given.metrics["factutil/cluster_work_ignored"] == 1.0
