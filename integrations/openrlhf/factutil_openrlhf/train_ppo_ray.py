"""Launcher: ``python -m factutil_openrlhf.train_ppo_ray [--factutil.* ...] <OpenRLHF args>``.

Starts Ray with ``factutil_openrlhf.install`` as the ``worker_process_setup_hook`` and the
factutil settings as ``FACTUTIL_*`` environment variables of every worker, then runs OpenRLHF's
own ``openrlhf.cli.train_ppo_ray`` as ``__main__`` with the remaining arguments (OpenRLHF
0.11.2 skips its own ``ray.init`` when Ray is already initialised, so the job's runtime env is
this one; it holds OpenRLHF's three default variables too).

Launcher options (everything else goes to OpenRLHF unchanged)::

    --factutil.<field> VALUE     a FactUtilConfig field, e.g. --factutil.omega 0.3
                                 (sets FACTUTIL_<FIELD>; FACTUTIL_* of this shell are forwarded)
    --factutil.env NAME=VALUE    one more environment variable for every worker (repeatable),
                                 e.g. the agent file's FACTAGENT_RETRIEVER_URL
    --factutil.entry MODULE      module run as __main__ (default openrlhf.cli.train_ppo_ray)
    --factutil.dry_run           print the runtime env, the command and its `ray job submit`
                                 form as JSON, and exit without starting Ray

Settings are validated before Ray starts: a bad one exits with status 2 and one line per
problem naming the variable. ``-h``/``--help`` prints this text and exits 0, starting nothing
(OpenRLHF's own options: ``python -m openrlhf.cli.train_ppo_ray --help``, on a machine with
OpenRLHF's GPU stack, since that module imports vLLM).
"""

from __future__ import annotations

import json
import os
import runpy
import shlex
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from factutil_openrlhf.settings import ENV_PREFIX, SettingsError, config_from_env, env_settings

SETUP_HOOK = "factutil_openrlhf.install"
DEFAULT_ENTRY = "openrlhf.cli.train_ppo_ray"
OPENRLHF_ENV_DEFAULTS = {
    "TOKENIZERS_PARALLELISM": "true",
    "NCCL_DEBUG": "WARN",
    "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": "1",
}
"""What ``openrlhf.cli.train_ppo_ray.train`` (0.11.2) puts in its own ``ray.init`` runtime env."""

EXIT_BAD_SETTINGS = 2
LAUNCHER_OPTIONS = ("dry_run", "env", "entry")
"""The launcher's own ``--factutil.*`` options; every other name is a config field."""


class LauncherArgs:
    """The launcher's own options, split from OpenRLHF's arguments.

    Attributes:
        settings: ``{FACTUTIL_<FIELD>: text}`` from ``--factutil.<field>``.
        extra_env: ``{NAME: VALUE}`` from ``--factutil.env``.
        entry: the module to run as ``__main__``.
        dry_run: print the plan and exit.
        rest: the arguments for OpenRLHF, in order.
    """

    def __init__(self) -> None:
        self.settings: dict[str, str] = {}
        self.extra_env: dict[str, str] = {}
        self.entry = DEFAULT_ENTRY
        self.dry_run = False
        self.rest: list[str] = []


def split_argv(argv: Sequence[str]) -> LauncherArgs:
    """Take the ``--factutil.*`` options out of ``argv`` (``--opt VALUE`` or ``--opt=VALUE``).

    Raises:
        SettingsError: an option without its value, a malformed ``--factutil.env``, or a name
            that is neither a launcher option nor a config field (with the closest one).
    """
    from factutil.config import FactUtilConfig  # pydantic on use: the module stays stdlib-only
    from factutil.errors import close_match

    known = [*LAUNCHER_OPTIONS, *FactUtilConfig.model_fields]
    parsed = LauncherArgs()
    items = list(argv)
    position = 0
    while position < len(items):
        item = items[position]
        position += 1
        if not item.startswith("--factutil"):
            parsed.rest.append(item)
            continue
        name, sep, value = item[len("--factutil."):].partition("=")
        if not item.startswith("--factutil.") or name.lower() not in known:
            close = close_match(item[len("--factutil"):].lstrip(".-_").partition("=")[0], known)
            raise SettingsError(f"{item.partition('=')[0]}: no launcher option or factutil setting"
                                + (f" (did you mean --factutil.{close}?)" if close else
                                   " (python -m factutil_openrlhf.train_ppo_ray --help; "
                                   "factutil schema --what config)"))
        if name == "dry_run":
            if sep:
                raise SettingsError("--factutil.dry_run takes no value")
            parsed.dry_run = True
            continue
        if not sep:
            if position >= len(items) or items[position].startswith("--"):
                got = f", got the option {items[position]!r}" if position < len(items) else ""
                raise SettingsError(f"--factutil.{name} needs a value{got} (a value that starts "
                                    f"with -- goes as --factutil.{name}=VALUE)")
            value = items[position]
            position += 1
        if name == "env":
            key, eq, text = value.partition("=")
            if not eq or not key:
                raise SettingsError(f"--factutil.env {value!r}: expected NAME=VALUE")
            parsed.extra_env[key] = text
        elif name == "entry":
            parsed.entry = value
        else:
            parsed.settings[ENV_PREFIX + name.upper()] = value
    return parsed


def build_runtime_env(
    launcher: LauncherArgs, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The Ray runtime env of the job: the setup hook and every worker's variables.

    ``env_vars`` = OpenRLHF's defaults (values from ``environ`` when set there), the
    ``FACTUTIL_*`` settings of ``environ``, then ``--factutil.<field>`` and ``--factutil.env``.

    Raises:
        SettingsError: the resulting settings fail :func:`config_from_env` (message names the
            variable).
    """
    environ = os.environ if environ is None else environ
    settings = {**env_settings(environ), **launcher.settings}
    config_from_env(settings)
    env_vars = {name: environ.get(name, value) for name, value in OPENRLHF_ENV_DEFAULTS.items()}
    env_vars.update(settings)
    env_vars.update(launcher.extra_env)
    return {"worker_process_setup_hook": SETUP_HOOK, "env_vars": env_vars}


def job_submit_command(runtime_env: Mapping[str, Any], entry: str, rest: Sequence[str]) -> str:
    """The equivalent ``ray job submit --runtime-env-json ... -- python3 -m ENTRY ...`` line.

    OpenRLHF's own variables are left out of the JSON: its ``train()`` sets them in its
    ``ray.init``, and Ray refuses a driver variable that the job's runtime env also sets.
    """
    env_vars = {
        name: value
        for name, value in runtime_env["env_vars"].items()
        if name not in OPENRLHF_ENV_DEFAULTS
    }
    job_env = {"worker_process_setup_hook": runtime_env["worker_process_setup_hook"]}
    if env_vars:
        job_env["env_vars"] = env_vars
    command = ["ray", "job", "submit", "--runtime-env-json", json.dumps(job_env, sort_keys=True)]
    command += ["--", "python3", "-m", entry, *rest]
    return shlex.join(command)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the launcher (see the module doc). Returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if "-h" in argv or "--help" in argv:
        print(__doc__.strip())
        return 0
    try:
        launcher = split_argv(argv)
        runtime_env = build_runtime_env(launcher)
    except SettingsError as error:
        for line in str(error).splitlines():
            print(f"factutil_openrlhf.train_ppo_ray: {line}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    if launcher.dry_run:
        plan = {
            "runtime_env": runtime_env,
            "command": ["python3", "-m", launcher.entry, *launcher.rest],
            "ray_job_submit": job_submit_command(runtime_env, launcher.entry, launcher.rest),
        }
        print(json.dumps(plan, indent=2, sort_keys=True))
        return 0

    import ray

    from factutil_openrlhf import install

    os.environ.update(runtime_env["env_vars"])
    ray.init(runtime_env=runtime_env)
    install()  # the driver imports OpenRLHF too; patching it there is harmless and consistent
    sys.argv = [launcher.entry, *launcher.rest]
    runpy.run_module(launcher.entry, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
