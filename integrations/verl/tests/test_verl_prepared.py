"""A rollout's work shipped from the rollout workers (``prepare_in_workers``): the trainer's step
takes each such rollout as a shipped row and gives the same advantages bit for bit; a rollout
whose worker sent nothing, or an older worker's facts' work (unreadable or made for another
embedder included), is computed by the step itself, and the metrics say so; a rollout whose work
cannot be read keeps only its group on verl's GRPO advantages."""

from __future__ import annotations

import copy
import dataclasses
import json
import logging

import pytest
import torch
from factutil import FactUtilConfig
from factutil.cluster import make_clusterer
from factutil.integration import SHIPPED_KEY, FactPreparer
from factutil.prepare import prepare_facts
from factutil.rollout_work import read_rollout_work
from factutil.schema import Rollout
from test_verl_agent_loop import (
    ANSWER,
    ASSERT_1,
    ASSERT_2,
    SEARCH_1,
    SEARCH_2,
    roll_out,
)
from verl_testkit import SAMPLE, build_rows

from factutil_verl.advantage import compute_factagent_advantages

pytestmark = pytest.mark.slow  # the bundled MiniLM

SEMANTIC = FactUtilConfig(mode="semantic")


@pytest.fixture(scope="module")
def small_rows(tmp_path_factory):
    """The first two questions of the sample (12 rollouts) as verl action-layout rows."""
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    uids = list(dict.fromkeys(json.loads(line)["uid"] for line in lines))[:2]
    path = tmp_path_factory.mktemp("sample") / "two_groups.jsonl"
    path.write_text(
        "\n".join(line for line in lines if json.loads(line)["uid"] in uids) + "\n",
        encoding="utf-8",
    )
    return build_rows(path)


def shipped_extras(rows, config, older=False):
    """The rows' extra fields as the factagent loop writes them with ``prepare_in_workers``: each
    trajectory's work, done by a worker's FactPreparer, on its last row (``older``: an older
    worker's facts' work alone, ``prepare_facts`` bytes)."""
    preparer = FactPreparer(config)
    extras = copy.deepcopy(rows.extra_fields)
    for line in rows.lines:
        rollout = Rollout.model_validate(line)
        last = rows.row_of_action[(rollout.uid, rollout.rollout_id, len(rollout.actions) - 1)]
        extras[last]["factutil"][SHIPPED_KEY] = (
            prepare_facts(rollout.actions, config, clusterer=preparer._clusterer).to_bytes()
            if older else preparer(rollout.actions)
        )
    return extras


def advantages(rows, config, extras, grpo=None):
    return compute_factagent_advantages(
        keys=rows.keys,
        uids=rows.uids,
        extra_fields=extras,
        response_mask=rows.response_mask,
        token_level_rewards=rows.rm_scores,
        grpo_advantages=torch.zeros(rows.response_mask.shape) if grpo is None else grpo,
        config=config,
        clusterer=make_clusterer(config),  # a fresh one each run: no cache carries vectors over
    )


def carrying(extras):
    """The factutil fields of the rows that carry a shipped item, in row order."""
    return [info["factutil"] for info in extras if SHIPPED_KEY in info["factutil"]]


def test_shipped_work_gives_the_same_advantages_bit_for_bit(small_rows, monkeypatch):
    alone = advantages(small_rows, SEMANTIC.model_copy(update={"prepare_in_workers": False}),
                       small_rows.extra_fields)
    extras = shipped_extras(small_rows, SEMANTIC)
    assert all(info[SHIPPED_KEY][:4] == b"FURW" for info in carrying(extras))

    def walks(*args, **kwargs):
        raise AssertionError("the step walked a shipped rollout's actions")

    with monkeypatch.context() as patched:  # shipped rows: the step never reads their actions
        patched.setattr("factutil.columns.rollout_columns", walks)
        shipped = advantages(small_rows, SEMANTIC, extras)

    assert alone.fallback == shipped.fallback == {}
    assert torch.equal(alone.advantages, shipped.advantages)
    assert shipped.metrics["factutil/prepared_shipped"] == len(small_rows.lines) == 12
    assert shipped.metrics["factutil/prepared_unshipped"] == 0.0
    assert shipped.metrics["factutil/cluster_prepared_ignored"] == 0.0
    # every fact came with its vector: the trainer's step embedded nothing
    assert shipped.metrics["factutil/cluster_prepared_facts"] > 0
    assert shipped.metrics["factutil/cluster_cache_misses"] == 0.0
    assert alone.metrics["factutil/cluster_cache_misses"] > 0
    assert "factutil/prepared_shipped" not in alone.metrics  # off: today's step, no such metric


def test_an_older_workers_facts_work_is_still_used(small_rows):
    alone = advantages(small_rows, SEMANTIC.model_copy(update={"prepare_in_workers": False}),
                       small_rows.extra_fields)
    extras = shipped_extras(small_rows, SEMANTIC, older=True)
    assert all(info[SHIPPED_KEY][:4] == b"FUPF" for info in carrying(extras))

    result = advantages(small_rows, SEMANTIC, extras)
    assert result.fallback == {}
    assert torch.equal(result.advantages, alone.advantages)
    assert result.metrics["factutil/prepared_shipped"] == 12.0
    assert result.metrics["factutil/prepared_unshipped"] == 0.0
    assert result.metrics["factutil/cluster_cache_misses"] == 0.0  # every vector came with them


def test_missing_unreadable_or_foreign_facts_work_is_done_by_the_step(small_rows):
    alone = advantages(small_rows, SEMANTIC.model_copy(update={"prepare_in_workers": False}),
                       small_rows.extra_fields)
    extras = shipped_extras(small_rows, SEMANTIC)
    items = carrying(extras)
    del items[0][SHIPPED_KEY]  # never shipped
    items[1][SHIPPED_KEY] = b"not a pickle"  # unreadable
    # an older worker's facts' work, made for another embedder
    foreign = read_rollout_work({0: items[2][SHIPPED_KEY]}, {0: ("", "")}, SEMANTIC).facts[0]
    assert len(foreign) > 0
    items[2][SHIPPED_KEY] = dataclasses.replace(foreign, embedder="another-model").to_bytes()

    result = advantages(small_rows, SEMANTIC, extras)
    assert result.fallback == {}
    assert torch.equal(result.advantages, alone.advantages)
    assert result.metrics["factutil/prepared_shipped"] == 10.0  # 12 rollouts, 2 brought none
    assert result.metrics["factutil/prepared_unshipped"] == 2.0
    assert result.metrics["factutil/cluster_prepared_ignored"] == 1.0
    assert result.metrics["factutil/cluster_cache_misses"] > 0  # the step embedded those facts


def test_a_damaged_shipped_row_keeps_only_its_group_on_grpo(small_rows, caplog):
    """One rollout's work is cut short in transit: its group keeps verl's GRPO advantages (the
    metric and one warning say why); the other group is scored as without any shipped work."""
    alone = advantages(small_rows, SEMANTIC.model_copy(update={"prepare_in_workers": False}),
                       small_rows.extra_fields)
    extras = shipped_extras(small_rows, SEMANTIC)
    damaged = carrying(extras)[1]
    damaged[SHIPPED_KEY] = damaged[SHIPPED_KEY][:-7]
    uid = damaged["trajectory_id"].rsplit("_", 1)[0]
    grpo = torch.arange(small_rows.response_mask.numel(), dtype=torch.float32).reshape(
        small_rows.response_mask.shape) / 1000.0  # distinct from any factutil value

    with caplog.at_level(logging.WARNING, logger="factutil_verl"):
        result = advantages(small_rows, SEMANTIC, extras, grpo=grpo)
    assert list(result.fallback) == [uid]
    assert result.fallback[uid].startswith(
        f"rollout {damaged['trajectory_id']!r}: its shipped work cannot be read")
    assert torch.isfinite(result.advantages).all()
    kept = torch.tensor([u == uid for u in small_rows.uids])
    assert kept.any() and not kept.all()
    assert torch.equal(result.advantages[kept], grpo[kept])
    assert torch.equal(result.advantages[~kept], alone.advantages[~kept])
    assert result.metrics["factutil/groups_fallback"] == 1.0
    assert result.metrics["factutil/prepared_unshipped"] == 1.0
    assert result.metrics["factutil/prepared_shipped"] == 11.0
    warnings = [r for r in caplog.records if r.name == "factutil_verl"]
    assert len(warnings) == 1 and "1 group(s) kept verl's GRPO advantages" in warnings[0].getMessage()


def test_the_loop_ships_its_rollouts_work_on_the_last_row(verl_config, byte_tokenizer,
                                                           retrieval_url):
    """Semantic mode (the default): the last row carries the trajectory's facts, embedded in the
    worker; with ``prepare_in_workers=false`` no row carries any."""
    script = [SEARCH_1, ASSERT_1, SEARCH_2, ASSERT_2, ANSWER]
    base = ["actor_rollout_ref.rollout.prompt_length=8192",
            "actor_rollout_ref.rollout.response_length=256"]
    outputs, _ = roll_out(verl_config(*base), byte_tokenizer, list(script),
                          retriever_url=retrieval_url)
    info = [output.extra_fields["factutil"] for output in outputs]
    assert [SHIPPED_KEY in i for i in info] == [False] * 4 + [True]
    work = read_rollout_work({0: info[-1][SHIPPED_KEY]}, {0: ("", "")}, SEMANTIC)
    assert work.unreadable == {}
    columns = work.columns[0]  # five actions: the two asserts at steps 1 and 3, one fact each
    assert columns.total == 5 and columns.occurrence_step == [1, 3]
    prepared = work.facts[0]
    assert prepared.parts == (
        ("Polish-Russian War", "director", "Xawery Żuławski"),
        ("Xawery Żuławski", "mother", "Małgorzata Braunek"),
    )
    assert prepared.vectors.shape == (2, 384) and prepared.analyses is not None

    off = verl_config(*base, "+algorithm.factutil.prepare_in_workers=false")
    outputs, _ = roll_out(off, byte_tokenizer, list(script), retriever_url=retrieval_url)
    assert not any(SHIPPED_KEY in output.extra_fields["factutil"] for output in outputs)
