"""factutil settings from ``FACTUTIL_*`` environment variables (docs/method.md §1–§5 fields).

Ray worker processes get their settings only through the environment (the launcher and the
``ray job submit --runtime-env-json`` form both put them in ``runtime_env["env_vars"]``), so this
is the one place the adapter reads the environment. Standard library only at import time;
:mod:`factutil` (pydantic) is imported when a configuration is actually built.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

ENV_PREFIX = "FACTUTIL_"
"""Every factutil setting is ``FACTUTIL_<FIELD>``: ``FACTUTIL_OMEGA=0.3``, ``FACTUTIL_MODE=exact``."""

COMPONENT_PREFIXES = ("FACTUTIL_OPENRLHF_", "FACTUTIL_VERL_", "FACTUTIL_RETRIEVAL_")
"""Namespaces reserved for the adapters and the retrieval server: never read as config fields."""
NOT_SETTINGS = ("FACTUTIL_CACHE",)
"""Variables of the library itself (the cache folder: factutil.embed.default_static_dir)."""

PAYLOAD_KEY = "factutil"
"""Key of the per-episode record in the executor's response and, briefly, in ``Experience.info``."""


class SettingsError(ValueError):
    """A ``FACTUTIL_*`` variable is unknown or fails validation; the message names the variable."""


def parse_env_value(text: str) -> Any:
    """One variable's text as a YAML scalar, like ``factutil score --set`` does
    (:func:`factutil.config.setting_value`): ``"0.3"`` -> 0.3, ``"true"`` -> True, ``"null"`` ->
    None, ``"exact"`` -> ``"exact"``; an empty text stays ``""``."""
    from factutil.config import setting_value  # pydantic on use: this module stays stdlib-only

    return setting_value(text)


def env_settings(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``FACTUTIL_<FIELD>`` variables of ``environ`` (default ``os.environ``), as given.

    Variables in :data:`COMPONENT_PREFIXES` and :data:`NOT_SETTINGS` are left out (they belong
    to other components or to the library itself).
    Returns ``{variable name: text}``, sorted by name.
    """
    environ = os.environ if environ is None else environ
    return {
        name: environ[name]
        for name in sorted(environ)
        if name.startswith(ENV_PREFIX) and not name.startswith(COMPONENT_PREFIXES)
        and name not in NOT_SETTINGS
    }


def config_from_env(environ: Mapping[str, str] | None = None, **overrides: Any):
    """Build and validate a :class:`factutil.FactUtilConfig` from ``FACTUTIL_*`` variables.

    ``FACTUTIL_OMEGA=0.3`` sets ``omega``; every field of the config (docs/method.md §1–§5; ``factutil
    schema --what config`` lists them) has its variable. Values are YAML scalars (see
    :func:`parse_env_value`). ``overrides`` (field=value) win over the environment.

    Args:
        environ: the variables to read; None reads ``os.environ``.
        overrides: config fields given in code.

    Returns:
        A frozen ``FactUtilConfig``.

    Raises:
        SettingsError: a ``FACTUTIL_*`` variable that names no config field (a typo must never
            silently keep a default), or a value that fails validation; one line per problem,
            each naming the variable, e.g. ``FACTUTIL_OMEGA='-1': omega: Input should be greater
            than or equal to 0``.
    """
    from factutil.config import FactUtilConfig, config_from_values
    from factutil.errors import close_match

    fields = set(FactUtilConfig.model_fields)
    values: dict[str, Any] = {}
    source: dict[str, str] = {}
    problems = []
    for name, text in env_settings(environ).items():
        field = name[len(ENV_PREFIX):].lower()
        if field not in fields:
            close = close_match(field, sorted(fields))
            problems.append(
                f"{name}: no factutil setting {field!r}"
                + (f" (did you mean {ENV_PREFIX + close.upper()}?)" if close else "; known: "
                   + ", ".join(ENV_PREFIX + known.upper() for known in sorted(fields)))
            )
            continue
        values[field] = parse_env_value(text)
        source[field] = f"{name}={text!r}"
    for field, value in overrides.items():
        values[field] = value
        source[field] = f"{field}={value!r} (given in code)"
    if problems:
        raise SettingsError("\n".join(problems))

    def where(field: str) -> str:
        name = field.split("[")[0].split(".")[0]  # "filters[0]" comes from FACTUTIL_FILTERS
        return f"{source.get(name, f'{ENV_PREFIX}{name.upper()}')}: {field}"

    return config_from_values(values, where, SettingsError)


def as_config(config: Any = None):
    """A :class:`factutil.FactUtilConfig` from what a caller gave: the config itself, a mapping of
    its fields, or None for the ``FACTUTIL_*`` environment (:func:`config_from_env`).

    Raises:
        SettingsError: bad ``FACTUTIL_*`` variables (None config).
        factutil.config.ConfigError: a bad mapping.
        TypeError: anything else (:func:`factutil.config.as_config`).
    """
    from factutil.config import as_config as core_config

    return config_from_env() if config is None else core_config(config)


def golden_answers_from_label(label: Any) -> list[str]:
    """The gold answers an OpenRLHF prompt's ``label`` holds (``--data.label_key``): the core's
    :func:`factutil.metrics.golden_answers_from` (a list of answers, a string holding a JSON list,
    a mapping with ``golden_answers``, ``answers``, ``target`` or ``answer``, a string or number).

    Returns:
        list[str], possibly empty (the group is then skipped by the core's validation).
    """
    # imported on use: this module stays stdlib-only
    from factutil.metrics import golden_answers_from

    return golden_answers_from(label)
