"""A sample's per-fact work made by the executor inside the engine actor (``prepare_in_workers``):
it rides in the sample's payload (base64 text of a work item's .npz) to
compute_advantages_and_returns, which gives the same advantages bit for bit; missing, damaged or
foreign work is computed there, and no group keeps OpenRLHF's advantages for it."""

from __future__ import annotations

import base64
import copy
import io
import json
from types import SimpleNamespace

import numpy as np
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
    return maker.compute_advantages_and_returns(batches), patch.active().step.clusterer


def work_of(payload):
    """The work item of a payload's base64 text, read as the step reads it."""
    from factutil.workers import read_work

    data = base64.b64decode(payload["work"])
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        fit = str(npz["fit"])
    given, counts, _ = read_work(data, fit, "cpu", 384)
    assert counts["work_unreadable"] == 0
    return given


def test_the_payload_carries_the_episodes_new_facts_as_json_text(shipped):
    seen = set()
    for response in shipped.responses:
        payload = response["factutil"]
        json.dumps(payload)  # still plain data
        if "work" not in payload:  # every fact of the episode was shipped before
            continue
        work = work_of(payload)
        asserted = {tuple(t) for a in payload["actions"] if a["action"] == "assert"
                    for t in a["triples"]}
        assert set(work.parts) <= asserted and not set(work.parts) & seen  # each fact once
        seen |= set(work.parts)
        assert work.vectors.shape == (len(work.parts), 384)
    assert seen


def _assert_same(alone, taken, **counts) -> None:
    """Each experience's advantages equal, bit for bit, and each ``factutil/<name>`` info metric
    of ``counts`` equal to its value on every row."""
    assert len(alone) == len(taken)
    for before, after in zip(alone, taken):
        assert torch.equal(before.advantages, after.advantages)
        for name, value in counts.items():
            assert torch.all(after.info[f"factutil/{name}"] == value), name


def test_the_engines_work_gives_the_same_advantages_bit_for_bit(openrlhf, shipped):
    alone, alone_clusterer = patched_advantages(
        openrlhf, shipped, SEMANTIC.model_copy(update={"prepare_in_workers": False})
    )
    assert alone_clusterer.metrics["cache_misses"] > 0
    taken, clusterer = patched_advantages(openrlhf, shipped, SEMANTIC)
    assert clusterer.metrics["work_facts"] == clusterer.metrics["facts"] > 0
    assert clusterer.metrics["cache_misses"] == 0  # every vector came from the engine
    _assert_same(alone, taken, skipped=0, groups_fallback=0, prepared_unshipped=0,
                 cluster_work_ignored=0, cluster_work_unreadable=0, cluster_work_other_device=0)


def test_missing_damaged_or_foreign_work_is_done_by_the_step(openrlhf, shipped):
    alone, _ = patched_advantages(
        openrlhf, shipped, SEMANTIC.model_copy(update={"prepare_in_workers": False})
    )
    episodes = SimpleNamespace(responses=copy.deepcopy(shipped.responses),
                               tokenizer=shipped.tokenizer)
    payloads = [r["factutil"] for r in episodes.responses if "work" in r["factutil"]]
    payloads[0]["work"] = None  # this engine's preparer failed
    payloads[1]["work"] = payloads[1]["work"][:-12]  # cut short in transit
    other = SEMANTIC.model_copy(update={"sim_threshold": 0.5})
    from factutil.preparer import FactPreparer

    payloads[2]["work"] = FactPreparer(other).text(payloads[2]["actions"])

    redone, clusterer = patched_advantages(openrlhf, episodes, SEMANTIC)
    assert clusterer.metrics["cache_misses"] > 0  # the step embedded those samples' facts
    _assert_same(alone, redone, skipped=0, prepared_unshipped=1, cluster_work_ignored=1,
                 cluster_work_unreadable=1)
