"""Per-fact work done by the executor inside the engine actor (``prepare_in_workers``): it rides
in the sample's payload to compute_advantages_and_returns, which then gives the same advantages
bit for bit; a sample whose work is missing or made for another embedder is computed there, and
the metrics say so."""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
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


def patched_advantages(openrlhf, episodes, config):
    """The patched compute_advantages_and_returns on the episodes; (experiences, clusterer)."""
    from factutil_openrlhf import patch

    patch.configure(config)
    maker = make_maker(openrlhf, episodes)
    batches = build_experiences(openrlhf, episodes, maker.args, maker)
    return maker.compute_advantages_and_returns(batches), patch.active().clusterer()


def test_the_payload_carries_the_episodes_work_as_json_text(shipped):
    from factutil.prepare import PreparedFacts

    for response in shipped.responses:
        payload = response["factutil"]
        json.dumps(payload)  # still plain data
        prepared = PreparedFacts.from_bytes(base64.b64decode(payload["prepared"]))
        asserted = {tuple(t) for a in payload["actions"] if a["action"] == "assert"
                    for t in a["triples"]}
        assert set(prepared.parts) <= asserted
        assert prepared.vectors.shape == ((len(prepared), 384) if len(prepared) else (0, 0))
    assert any(len(PreparedFacts.from_bytes(base64.b64decode(r["factutil"]["prepared"])))
               for r in shipped.responses)


def test_shipped_work_gives_the_same_advantages_bit_for_bit(openrlhf, shipped):
    alone, alone_clusterer = patched_advantages(
        openrlhf, shipped, SEMANTIC.model_copy(update={"prepare_in_workers": False})
    )
    assert alone_clusterer.metrics["cache_misses"] > 0
    taken, clusterer = patched_advantages(openrlhf, shipped, SEMANTIC)
    assert clusterer.metrics["prepared_facts"] > 0
    assert clusterer.metrics["cache_misses"] == 0  # every vector came from the engine
    for before, after in zip(alone, taken):
        assert torch.equal(before.advantages, after.advantages)
        assert torch.all(after.info["factutil/skipped"] == 0)
        assert torch.all(after.info["factutil/prepared_unshipped"] == 0)
        assert torch.all(after.info["factutil/prepared_ignored"] == 0)
        assert torch.all(after.info["factutil/prepared_other_device"] == 0)  # all on the CPU


def test_missing_or_foreign_work_is_done_by_the_step(openrlhf, shipped):
    from factutil.prepare import PreparedFacts

    alone, _ = patched_advantages(
        openrlhf, shipped, SEMANTIC.model_copy(update={"prepare_in_workers": False})
    )
    episodes = SimpleNamespace(responses=copy.deepcopy(shipped.responses),
                               tokenizer=shipped.tokenizer)
    payloads = [response["factutil"] for response in episodes.responses]
    del payloads[0]["prepared"]  # this engine shipped nothing
    foreign = PreparedFacts.from_bytes(base64.b64decode(payloads[7]["prepared"]))
    other = dataclasses.replace(foreign, embedder="another-model")
    payloads[7]["prepared"] = base64.b64encode(other.to_bytes()).decode("ascii")

    redone, clusterer = patched_advantages(openrlhf, episodes, SEMANTIC)
    assert clusterer.metrics["cache_misses"] > 0  # the step embedded those samples' facts
    for before, after in zip(alone, redone):
        assert torch.equal(before.advantages, after.advantages)
        assert torch.all(after.info["factutil/skipped"] == 0)
        assert torch.all(after.info["factutil/prepared_unshipped"] == 1)
        assert torch.all(after.info["factutil/prepared_ignored"] == 1)
