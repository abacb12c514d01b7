"""Fixtures for the OpenRLHF adapter tests: OpenRLHF's real modules, imported on CPU."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest
from openrlhf_testkit import add_standins, remove_standins


@pytest.fixture(scope="module")
def openrlhf():
    """OpenRLHF 0.11's agent, experience and samples-generator modules, patched by factutil.

    The flash_attn/vllm stand-ins live only while this module's tests run, so tests of other
    packages in the same pytest process never see them.
    """
    pytest.importorskip("openrlhf")
    added = add_standins()
    try:
        from factutil_openrlhf import install

        install({"mode": "exact"})  # tests pass mode explicitly (docs/method.md §2 ablation baseline)
        modules = SimpleNamespace(
            agent=importlib.import_module("openrlhf.utils.agent"),
            experience=importlib.import_module("openrlhf.trainer.ppo_utils.experience"),
            experience_maker=importlib.import_module("openrlhf.trainer.ppo_utils.experience_maker"),
            samples_generator=importlib.import_module("openrlhf.trainer.ppo_utils.samples_generator"),
        )
        yield modules
    finally:
        remove_standins(added)
