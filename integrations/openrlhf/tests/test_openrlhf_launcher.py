"""The launcher: option split, runtime env, dry-run plan, a real Ray job, and the run script's
OpenRLHF arguments through OpenRLHF's own parser."""

from __future__ import annotations

import json
import os
import runpy
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from factutil_openrlhf.settings import SettingsError
from factutil_openrlhf.train_ppo_ray import build_runtime_env, main, split_argv

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parents[2]


def clean_env(**extra: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("FACTUTIL_", "RAY_"))}
    environ.update(extra)
    return environ


def test_split_argv_takes_only_factutil_options():
    parsed = split_argv(
        ["--factutil.omega", "0.3", "--actor.model_name_or_path", "m", "--factutil.mode=exact",
         "--factutil.env", "A=b=c", "--factutil.dry_run", "--train.seed", "7"]
    )
    assert parsed.settings == {"FACTUTIL_OMEGA": "0.3", "FACTUTIL_MODE": "exact"}
    assert parsed.extra_env == {"A": "b=c"}
    assert parsed.dry_run
    assert parsed.rest == ["--actor.model_name_or_path", "m", "--train.seed", "7"]


def test_runtime_env_forwards_settings_and_openrlhf_defaults():
    runtime_env = build_runtime_env(
        split_argv(["--factutil.omega", "0.3"]),
        {"FACTUTIL_ALPHA": "0.1", "NCCL_DEBUG": "INFO", "HOME": "/root"},
    )
    assert runtime_env["worker_process_setup_hook"] == "factutil_openrlhf.install"
    assert runtime_env["env_vars"] == {
        "FACTUTIL_ALPHA": "0.1", "FACTUTIL_OMEGA": "0.3", "NCCL_DEBUG": "INFO",
        "TOKENIZERS_PARALLELISM": "true", "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": "1",
    }


def test_bad_setting_exits_2_naming_it(capsys, monkeypatch):
    monkeypatch.delenv("FACTUTIL_OMEGA", raising=False)
    assert main(["--factutil.omega", "-1", "--factutil.dry_run"]) == 2
    assert "FACTUTIL_OMEGA='-1': omega" in capsys.readouterr().err
    assert main(["--factutil.omega"]) == 2


def test_an_option_is_never_taken_as_the_value_before_it():
    """``--factutil.omega --factutil.dry_run`` forgot omega's value: refused, not omega =
    "--factutil.dry_run"; a value that starts with -- goes with ``=``."""
    with pytest.raises(SettingsError) as caught:
        split_argv(["--factutil.omega", "--factutil.dry_run"])
    assert str(caught.value) == ("--factutil.omega needs a value, got the option "
                                 "'--factutil.dry_run' (a value that starts with -- goes as "
                                 "--factutil.omega=VALUE)")
    assert split_argv(["--factutil.triple_template=--{subject}"]).settings == {
        "FACTUTIL_TRIPLE_TEMPLATE": "--{subject}"}
    assert split_argv(["--factutil.omega", "-0.5"]).settings == {"FACTUTIL_OMEGA": "-0.5"}


@pytest.mark.parametrize("given,hint", [
    (["--factutil.dryrun"], " (did you mean --factutil.dry_run?)"),
    (["--factutil.dry-run"], " (did you mean --factutil.dry_run?)"),
    (["--factutil.omgea", "0.3"], " (did you mean --factutil.omega?)"),
    (["--factutil.entyr=m"], " (did you mean --factutil.entry?)"),
    (["--factutil-omega", "0.3"], " (did you mean --factutil.omega?)"),
    (["--factutil.zzz", "1"], (" (python -m factutil_openrlhf.train_ppo_ray --help; factutil "
                              "schema --what config)")),
])
def test_a_misspelt_launcher_option_is_refused_with_the_closest_name(given, hint, capsys):
    """A typo of a launcher option or config field is never taken as a setting nor passed to
    OpenRLHF: exit 2 with one line naming it and the closest known name."""
    assert main([*given, "--factutil.dry_run"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    option = given[0].partition("=")[0]
    assert line == (f"factutil_openrlhf.train_ppo_ray: {option}: no launcher option or "
                    f"factutil setting{hint}")


def test_help_prints_the_launcher_options_and_starts_nothing(capsys, monkeypatch):
    """--help (anywhere among the arguments) -> the launcher's options on stdout, exit 0, and
    neither Ray nor OpenRLHF is imported (both are blocked here: importing one would raise)."""
    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.setitem(sys.modules, "openrlhf", None)
    for argv in (["--help"], ["--factutil.omega", "0.3", "-h", "--train.seed", "1"]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "--factutil.dry_run" in out and "python -m openrlhf.cli.train_ppo_ray --help" in out


def test_dry_run_plan_and_job_submit_form(capsys, monkeypatch):
    for name in [n for n in os.environ if n.startswith("FACTUTIL_")]:
        monkeypatch.delenv(name)
    assert main(["--factutil.mode", "exact", "--factutil.dry_run", "--train.agent_func_path", "a b.py"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["command"] == ["python3", "-m", "openrlhf.cli.train_ppo_ray", "--train.agent_func_path", "a b.py"]
    submit = plan["ray_job_submit"]
    assert submit.startswith("ray job submit --runtime-env-json '{")
    job_env = json.loads(submit.split("'")[1])
    # OpenRLHF's own ray.init sets its three variables; repeating them in the job env is a Ray error.
    assert job_env == {"env_vars": {"FACTUTIL_MODE": "exact"}, "worker_process_setup_hook": "factutil_openrlhf.install"}
    assert submit.endswith("-- python3 -m openrlhf.cli.train_ppo_ray --train.agent_func_path 'a b.py'")


@pytest.mark.integration
def test_launcher_starts_a_ray_job_whose_workers_are_patched():
    pytest.importorskip("openrlhf")
    # A cluster of its own: RAY_ADDRESS=local, and a private temp dir that no `ray start` or
    # other test's cluster shares (short: Ray's socket paths must fit in 107 bytes).
    ray_tmp = tempfile.mkdtemp(prefix="frl", dir="/tmp")
    try:
        result = run_launcher(ray_tmp)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    lines = [line for line in result.stdout.splitlines() if line.startswith("PROBE ")]
    assert result.returncode == 0 and lines, result.stderr[-3000:]
    found = json.loads(lines[-1][len("PROBE "):])
    assert found == {
        "hooked": True, "patched": True, "omega": 0.125, "extra_env": "yes",
        "argv": ["--actor.model_name_or_path", "m"], "driver_ray_initialized": True,
    }


def run_launcher(ray_tmp: str) -> subprocess.CompletedProcess:
    """The launcher in a session of its own, so a hang kills Ray's processes with it."""
    process = subprocess.Popen(
        [sys.executable, "-m", "factutil_openrlhf.train_ppo_ray",
         "--factutil.omega", "0.125", "--factutil.mode", "exact",
         "--factutil.env", "FACTAGENT_PROBE=yes", "--factutil.entry", "openrlhf_ray_probe",
         "--actor.model_name_or_path", "m"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=TESTS, start_new_session=True,
        env=clean_env(RAY_ADDRESS="local", RAY_TMPDIR=ray_tmp, PYTHONPATH=str(TESTS)),
    )
    try:
        stdout, stderr = process.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def test_run_script_arguments_parse_with_openrlhf_parser(openrlhf, tmp_path, monkeypatch):
    """The run script's OpenRLHF arguments, plus the optional ones its comments name (dynamic
    filtering, the paper preset), pass OpenRLHF 0.11.2's own parser and checks, up to
    ``train()`` (which needs GPUs): argparse and every assert before it run for real."""
    script = ROOT / "examples/openrlhf/run_factagent_2wiki.sh"
    optional = [word for line in script.read_text(encoding="utf-8").splitlines()
                if line.startswith("#   --") for word in shlex.split(line[1:])]
    assert optional == ["--algo.dynamic_filtering_enable", "--algo.dynamic_filtering_range", "0",
                        "1", "--factutil.preset", "paper"]
    plan = subprocess.run(
        ["bash", str(script), "--dry-run", *optional],
        check=False, capture_output=True, text=True, timeout=120, cwd=ROOT,
        env=clean_env(OUT=str(tmp_path), PYTHON=sys.executable),
    )
    assert plan.returncode == 0, plan.stderr
    plan = json.loads(plan.stdout[plan.stdout.index("{"):])
    assert (tmp_path / "2wiki_prompts.jsonl").read_text(encoding="utf-8").count("\n") == 30
    env_vars = plan["runtime_env"]["env_vars"]
    assert (env_vars["FACTUTIL_OMEGA"], env_vars["FACTUTIL_MODE"]) == ("0.5", "semantic")
    assert env_vars["FACTUTIL_PRESET"] == "paper"
    command = plan["command"]
    assert command[:3] == ["python3", "-m", "openrlhf.cli.train_ppo_ray"]

    import openrlhf.utils
    import ray

    class Parsed(Exception):
        pass

    def stop(args):
        raise Parsed(args)

    monkeypatch.setattr(openrlhf.utils, "get_strategy", stop)
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(sys, "argv", ["train_ppo_ray.py", *command[3:]])
    with pytest.raises(Parsed) as parsed:
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__")
    args = parsed.value.args[0]
    assert args.algo.advantage.estimator == "group_norm"
    assert args.rollout.n_samples_per_prompt == 6
    assert args.train.agent_func_path == "examples/openrlhf/factagent_agent.py"
    assert args.reward.remote_url == ["agent"]
    assert args.algo.dynamic_filtering_enable and list(args.algo.dynamic_filtering_range) == [0, 1]
