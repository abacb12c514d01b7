"""``+algorithm.factutil.*`` and agent-loop options: validated, errors naming the key."""

from __future__ import annotations

import pytest

from factutil_verl.config import (
    FactUtilConfigError,
    agent_loop_config,
    factutil_config_from_verl,
)


def test_defaults_follow_verls_norm_adv_by_std_in_grpo(verl_config):
    config = factutil_config_from_verl(
        verl_config("algorithm.norm_adv_by_std_in_grpo=false").algorithm
    )
    assert config.norm_by_std is False
    assert config.omega == 0.5 and config.alpha == 0.2 and config.max_turns == 8
    explicit = factutil_config_from_verl(
        {"norm_adv_by_std_in_grpo": False, "factutil": {"norm_by_std": True}}
    )
    assert explicit.norm_by_std is True


def test_hydra_overrides_reach_the_config(verl_config):
    algorithm = verl_config(
        "+algorithm.factutil.omega=0.3",
        "+algorithm.factutil.mode=exact",
        "+algorithm.factutil.alpha=0",
    ).algorithm
    config = factutil_config_from_verl(algorithm)
    assert (config.omega, config.mode, config.alpha) == (0.3, "exact", 0.0)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "+algorithm.factutil.omega=-1",
            "algorithm.factutil.omega: Input should be greater than or equal to 0 (got -1)",
        ),
        (
            "+algorithm.factutil.omgea=0.3",
            "algorithm.factutil.omgea: unknown field 'omgea' (did you mean 'omega'?)",
        ),
        (
            "+algorithm.factutil.mode=fuzzy",
            "algorithm.factutil.mode: Input should be 'exact' or 'semantic' (got 'fuzzy')",
        ),
        (
            "+algorithm.factutil=3",
            "algorithm.factutil: expected a mapping of FactUtilConfig fields, got 3",
        ),
    ],
)
def test_bad_keys_are_named(verl_config, override, message):
    with pytest.raises(FactUtilConfigError) as raised:
        factutil_config_from_verl(verl_config(override).algorithm)
    assert message in str(raised.value)


def test_the_trainer_refuses_a_bad_config_before_building_anything(verl_config):
    from factutil_verl.trainer import FactUtilTrainer

    with pytest.raises(FactUtilConfigError, match="algorithm.factutil.alpha"):
        FactUtilTrainer(verl_config("algorithm.adv_estimator=grpo", "+algorithm.factutil.alpha=2"))
    with pytest.raises(FactUtilConfigError, match="algorithm.adv_estimator: .* needs 'grpo'"):
        FactUtilTrainer(verl_config("algorithm.adv_estimator=gae"))


def test_agent_loop_options():
    options = agent_loop_config({"retriever_url": "http://127.0.0.1:9/retrieve", "topk": 5})
    assert options.topk == 5 and options.timeout_s == 10.0 and options.max_turns is None
    with pytest.raises(FactUtilConfigError, match=r"agent_loop.factagent.topk: .* \(got 0\)"):
        agent_loop_config({"topk": 0})
    with pytest.raises(
        FactUtilConfigError, match="agent_loop.factagent.retriver_url: Extra inputs"
    ):
        agent_loop_config({"retriver_url": "x"})


@pytest.mark.parametrize("bad", [["paper"], {"a": 1}, object()], ids=["list", "mapping", "object"])
def test_every_field_of_a_wrong_type_is_an_error_naming_its_key(bad):
    """``+algorithm.factutil.<field>`` given a list, a mapping or an object (what Hydra can
    hand over) -> FactUtilConfigError whose lines all name ``algorithm.factutil.<field>``."""
    from factutil import FactUtilConfig

    for field in FactUtilConfig.model_fields:
        with pytest.raises(FactUtilConfigError) as caught:
            factutil_config_from_verl({"factutil": {field: bad}})
        lines = str(caught.value).splitlines()
        assert lines and all(line.startswith(f"algorithm.factutil.{field}") for line in lines)
