"""A sample's work done by the executor inside the engine actor (``prepare_in_workers``): it rides
in the sample's payload to compute_advantages_and_returns, which takes the sample as a shipped
row and gives the same advantages bit for bit; a sample whose work is missing, or an older
engine's facts' work (made for another embedder included), is computed there, and the metrics
say so; a sample whose work cannot be read keeps only its group on OpenRLHF's advantages."""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
import logging
from types import SimpleNamespace

import pytest
import torch
from openrlhf_testkit import ToyTokenizer, load_sample, make_instance_cls, run_groups
from test_openrlhf_advantages import EXECUTOR_MAX_LENGTH, build_experiences, make_maker

from factutil import FactUtilConfig

pytestmark = pytest.mark.slow  # the bundled MiniLM

SEMANTIC = FactUtilConfig(omega=0.5, mode="semantic")


@pytest.fixture(scope="module")
def shipped(openrlhf):
    """Two groups (12 samples) through an executor that ships its per-fact work (the run's
    config: semantic mode, read in the engine as install() or the environment gives it)."""
    from factutil_openrlhf import executor as executor_module
    from factutil_openrlhf import make_executor

    restore = executor_module.requested_config
    executor_module.requested_config = lambda: SEMANTIC
    try:
        executor = make_executor(make_instance_cls())()
        tokenizer = ToyTokenizer()
        results = run_groups(executor, load_sample(limit_groups=2), tokenizer, EXECUTOR_MAX_LENGTH)
    finally:
        executor_module.requested_config = restore
    return SimpleNamespace(responses=[r for r, _ in results], tokenizer=tokenizer)


def facts_work(payload):
    """The facts' work inside a payload's shipped rollout work."""
    from factutil.rollout_work import read_rollout_work

    work = read_rollout_work({0: base64.b64decode(payload["prepared"])}, {0: ("", "")}, SEMANTIC)
    assert work.unreadable == {}
    return work


def openrlhf_advantages(openrlhf, episodes):
    """OpenRLHF's own compute_advantages_and_returns on the episodes (the unpatched method)."""
    from factutil_openrlhf import patch

    maker = make_maker(openrlhf, episodes)
    batches = build_experiences(openrlhf, episodes, maker.args, maker)
    for batch in batches:
        batch.info.pop("factutil")
    method = openrlhf.experience_maker.RemoteExperienceMaker.compute_advantages_and_returns
    return getattr(method, patch.PATCHED)(maker, batches)


def patched_advantages(openrlhf, episodes, config):
    """The patched compute_advantages_and_returns on the episodes; (experiences, clusterer)."""
    from factutil_openrlhf import patch

    patch.configure(config)
    maker = make_maker(openrlhf, episodes)
    batches = build_experiences(openrlhf, episodes, maker.args, maker)
    return maker.compute_advantages_and_returns(batches), patch.active().clusterer()


def test_the_payload_carries_the_episodes_work_as_json_text(shipped):
    facts = 0
    for response in shipped.responses:
        payload = response["factutil"]
        json.dumps(payload)  # still plain data
        work = facts_work(payload)
        assert work.columns[0].total == len(payload["actions"])  # every recorded action
        prepared = work.facts[0]
        asserted = {tuple(t) for a in payload["actions"] if a["action"] == "assert"
                    for t in a["triples"]}
        assert set(prepared.parts) <= asserted
        assert prepared.vectors.shape == ((len(prepared), 384) if len(prepared) else (0, 0))
        facts += len(prepared)
    assert facts > 0


def _assert_same(alone, taken, **counts) -> None:
    """Each experience's advantages equal, bit for bit, and each ``factutil/<name>`` info metric
    of ``counts`` equal to its value on every row."""
    assert len(alone) == len(taken)
    for before, after in zip(alone, taken):
        assert torch.equal(before.advantages, after.advantages)
        for name, value in counts.items():
            assert torch.all(after.info[f"factutil/{name}"] == value), name


def test_shipped_work_gives_the_same_advantages_bit_for_bit(openrlhf, shipped):
    alone, alone_clusterer = patched_advantages(
        openrlhf, shipped, SEMANTIC.model_copy(update={"prepare_in_workers": False})
    )
    assert alone_clusterer.metrics["cache_misses"] > 0
    taken, clusterer = patched_advantages(openrlhf, shipped, SEMANTIC)
    assert clusterer.metrics["prepared_facts"] > 0
    assert clusterer.metrics["cache_misses"] == 0  # every vector came from the engine
    # all on the CPU: no work from another kind of device
    _assert_same(alone, taken, skipped=0, prepared_unshipped=0, prepared_ignored=0,
                 prepared_other_device=0)


def test_missing_or_foreign_work_is_done_by_the_step(openrlhf, shipped):
    alone, _ = patched_advantages(
        openrlhf, shipped, SEMANTIC.model_copy(update={"prepare_in_workers": False})
    )
    episodes = SimpleNamespace(responses=copy.deepcopy(shipped.responses),
                               tokenizer=shipped.tokenizer)
    payloads = [response["factutil"] for response in episodes.responses]
    del payloads[0]["prepared"]  # this engine shipped nothing
    # an older engine's facts' work, made for another embedder
    foreign = facts_work(payloads[7]).facts[0]
    assert len(foreign) > 0
    other = dataclasses.replace(foreign, embedder="another-model")
    payloads[7]["prepared"] = base64.b64encode(other.to_bytes()).decode("ascii")

    redone, clusterer = patched_advantages(openrlhf, episodes, SEMANTIC)
    assert clusterer.metrics["cache_misses"] > 0  # the step embedded those samples' facts
    _assert_same(alone, redone, skipped=0, prepared_unshipped=1, prepared_ignored=1)


def test_an_older_engines_facts_work_is_still_used(openrlhf, shipped):
    alone, _ = patched_advantages(
        openrlhf, shipped, SEMANTIC.model_copy(update={"prepare_in_workers": False})
    )
    episodes = SimpleNamespace(responses=copy.deepcopy(shipped.responses),
                               tokenizer=shipped.tokenizer)
    for response in episodes.responses:  # what an engine shipped before rollouts' work
        facts = facts_work(response["factutil"]).facts[0].to_bytes()
        response["factutil"]["prepared"] = base64.b64encode(facts).decode("ascii")

    taken, clusterer = patched_advantages(openrlhf, episodes, SEMANTIC)
    assert clusterer.metrics["prepared_facts"] > 0
    assert clusterer.metrics["cache_misses"] == 0  # every vector came from the engine
    _assert_same(alone, taken, skipped=0, prepared_unshipped=0)


def test_a_damaged_sample_keeps_only_its_group_on_openrlhf_advantages(openrlhf, shipped, caplog):
    """Sample 8's work is cut short in transit: group 1 (samples 6-11) keeps OpenRLHF's own
    advantages, with factutil/skipped and one warning; group 0 is scored as without it."""
    alone, _ = patched_advantages(
        openrlhf, shipped, SEMANTIC.model_copy(update={"prepare_in_workers": False})
    )
    episodes = SimpleNamespace(responses=copy.deepcopy(shipped.responses),
                               tokenizer=shipped.tokenizer)
    payload = episodes.responses[8]["factutil"]
    cut = base64.b64decode(payload["prepared"])[:-7]
    payload["prepared"] = base64.b64encode(cut).decode("ascii")
    own = openrlhf_advantages(openrlhf, episodes)

    with caplog.at_level(logging.WARNING, logger="factutil.openrlhf"):
        damaged, _ = patched_advantages(openrlhf, episodes, SEMANTIC)
    warnings = [r.getMessage() for r in caplog.records if r.name == "factutil.openrlhf"]
    assert len(warnings) == 1
    assert "1 group(s) kept OpenRLHF's advantages" in warnings[0]
    assert "group 1: rollout '8': its shipped work cannot be read" in warnings[0]
    groups = set()
    for plain, before, after in zip(own, alone, damaged):
        assert torch.isfinite(after.advantages).all()
        assert torch.all(after.info["factutil/prepared_unshipped"] == 1)
        for row, index in enumerate(after.index):
            kept = index // 6 == 1
            groups.add(index // 6)
            assert after.info["factutil/skipped"][row] == float(kept)
            want = plain.advantages[row] if kept else before.advantages[row]
            assert torch.equal(after.advantages[row], want)
    assert groups == {0, 1}
    # the process term did change group 0's advantages, so the comparison above tells them apart
    assert any(not torch.equal(a.advantages, b.advantages) for a, b in zip(own, alone))
