"""Configuration of the verl adapter: ``+algorithm.factutil.*`` and the agent loop's options.

Every method parameter lives in :class:`factutil.FactUtilConfig` and is given under
``algorithm.factutil`` in verl's Hydra config (``+algorithm.factutil.omega=0.5``). Errors name the
full key (``algorithm.factutil.omega: ... (got -1)``). The agent loop's own options (retriever URL,
top-k, timeouts) are keyword arguments of its entry in the agent-loop YAML and are validated by
:class:`FactAgentLoopConfig`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from factutil import search_r1
from factutil.config import ConfigError, FactUtilConfig, config_from_values, error_lines
from pydantic import BaseModel, ConfigDict, Field, ValidationError

CONFIG_KEY = "algorithm.factutil"


class FactUtilConfigError(ConfigError):
    """A bad ``algorithm.factutil`` (or agent-loop) setting; one ``key: problem (got value)`` line each."""


def to_plain(value: Any) -> Any:
    """An OmegaConf node (or anything holding some) as plain dicts and lists; others unchanged."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
    except ImportError:  # pragma: no cover - verl always brings omegaconf
        return value
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


def _under(prefix: str):
    """Names a field in error lines as ``prefix.field`` (``prefix`` for the whole value)."""
    return lambda field: prefix if field == "(line)" else f"{prefix}.{field}"


def factutil_config_from_verl(algorithm: Mapping[str, Any] | Any) -> FactUtilConfig:
    """Build the :class:`FactUtilConfig` of a verl run from its ``algorithm`` section (docs/method.md §1–§5).

    ``algorithm.factutil`` holds any :class:`FactUtilConfig` field. When it does not set
    ``norm_by_std``, verl's ``algorithm.norm_adv_by_std_in_grpo`` is used, so the outcome part
    matches verl's GRPO (docs/method.md §5).

    Args:
        algorithm: verl's ``config.algorithm`` (DictConfig or mapping); None or missing
            ``factutil`` gives the defaults.

    Raises:
        FactUtilConfigError: ``algorithm.factutil`` is not a mapping or a field fails validation;
            each line names ``algorithm.factutil.<field>`` and the value given.
    """
    algorithm = to_plain(algorithm) or {}
    if not isinstance(algorithm, Mapping):
        raise FactUtilConfigError(f"algorithm: expected a mapping, got {type(algorithm).__name__}")
    values = to_plain(algorithm.get("factutil")) or {}
    if not isinstance(values, Mapping):
        raise FactUtilConfigError(
            f"{CONFIG_KEY}: expected a mapping of FactUtilConfig fields, got {values!r}"
        )
    values = dict(values)
    if "norm_by_std" not in values and "norm_adv_by_std_in_grpo" in algorithm:
        values["norm_by_std"] = bool(algorithm["norm_adv_by_std_in_grpo"])
    return config_from_values(values, _under(CONFIG_KEY), FactUtilConfigError)


class RetrieverLoopConfig(BaseModel):
    """Options every retrieving agent loop of this package takes (``factagent``, ``search_r1``):
    keyword arguments of its agent-loop YAML entry.

    ``max_turns`` None takes ``algorithm.factutil.max_turns`` (docs/method.md §1, default 8), so the loop
    and the credit agree on the horizon.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    retriever_url: str = Field(
        "http://127.0.0.1:8000/retrieve", description="Search-R1 /retrieve endpoint (POST)."
    )
    topk: int = Field(3, ge=1, le=100, description="Passages per search.")
    timeout_s: float = Field(10.0, gt=0, description="Seconds per retrieval attempt.")
    retries: int = Field(1, ge=0, le=10, description="Extra attempts after a timeout or HTTP 5xx.")
    max_observation_chars: int = Field(
        4000, ge=100, description="An observation is cut to this many characters."
    )
    max_turns: int | None = Field(
        None, ge=1, description="Most actions per rollout; None: algorithm.factutil.max_turns."
    )
    max_action_tokens: int | None = Field(
        None, ge=1, description="max_tokens of each generation; None: the server's default."
    )


class FactAgentLoopConfig(RetrieverLoopConfig):
    """Options of the ``factagent`` agent loop."""

    instructions: str | None = Field(
        None, description="System text of every turn; None: factutil_verl.prompt.INSTRUCTIONS."
    )


class SearchR1LoopConfig(RetrieverLoopConfig):
    """Options of the ``search_r1`` agent loop (the dataset's own prompt, Search-R1's tags)."""

    stop: tuple[str, ...] = Field(
        search_r1.STOP,
        description="Stop strings of each generation, kept in the output (vLLM's stop and "
        "include_stop_str_in_output); empty: none are sent.",
    )


def agent_loop_config(
    options: Mapping[str, Any],
    model: type[RetrieverLoopConfig] = FactAgentLoopConfig,
    name: str = "factagent",
) -> RetrieverLoopConfig:
    """Validate an agent loop's keyword arguments; errors name ``agent_loop.<name>.<key>``.

    Raises:
        FactUtilConfigError: an unknown key or a bad value.
    """
    try:
        return model.model_validate({k: to_plain(v) for k, v in options.items()})
    except ValidationError as error:
        raise FactUtilConfigError(error_lines(error, _under(f"agent_loop.{name}"))) from None
