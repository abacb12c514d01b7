"""The repository as a newcomer meets it: the Makefile's documented forms, docs/method.md (every
section cited exists, every config field and output column is described, its worked example holds),
and no path that exists only on a developer's machine."""

from __future__ import annotations

import dataclasses
import math
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from factutil import FactUtilConfig, compute_process_advantages
from factutil.api import ActionRecord

ROOT = Path(__file__).resolve().parents[1]
METHOD = ROOT / "docs" / "method.md"
make = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def make_dry_run(*args: str) -> list[list[str]]:
    """``make -n ARGS`` in the repository: each printed command, split as the shell splits it."""
    done = subprocess.run(["make", "-n", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True)
    return [shlex.split(line) for line in done.stdout.replace("\\\n", " ").splitlines()
            if line.strip()]


REQUIREMENTS = ROOT / "requirements"


def lock_versions(name: str) -> dict[str, str]:
    """``requirements/NAME``'s pins: package -> version (editable lines aside)."""
    pins = re.findall(r"^([A-Za-z0-9._-]+)==(\S+)$", (REQUIREMENTS / name).read_text(encoding="utf-8"),
                      re.MULTILINE)
    return {package.lower(): version for package, version in pins}


@make
@pytest.mark.parametrize("target, lock", [("test", "test.lock"), ("demo", "demo.lock")])
def test_make_installs_one_lock_in_one_step(tmp_path, target, lock):
    """``make demo`` / ``make test``: uv (the lock's own version) with the venv's pip, then one
    ``uv pip sync`` of the lock; no other install, so nothing resolves against the day's index."""
    venv = str(tmp_path / "venv")
    commands = make_dry_run(target, f"VENV={venv}")
    installs = [c for c in commands if c[0].endswith("/pip") or c[0].endswith("/uv") and c[1] == "pip"]
    assert installs[0] == [f"{venv}/bin/pip", "install", "--quiet",
                           f"uv=={lock_versions('test.lock')['uv']}"]
    (sync,) = installs[1:]
    assert sync[:3] == [f"{venv}/bin/uv", "pip", "sync"] and sync[-1] == f"requirements/{lock}"


def test_the_locks_pin_what_the_inputs_name_and_agree():
    """Every ``==`` of requirements/*.in is the lock's version; the demo's lock is part of the
    test lock, at the same versions; the test lock holds the overridden transformers (< 5.11) and
    none of the packages overrides.txt leaves out."""
    test, demo = lock_versions("test.lock"), lock_versions("demo.lock")
    for name, lock in (("test.in", test), ("demo.in", demo)):
        for package, version in re.findall(r"^([A-Za-z0-9_-]+)(?:\[[^]]*\])?==(\S+)$",
                                           (REQUIREMENTS / name).read_text(encoding="utf-8"),
                                           re.MULTILINE):
            assert lock[package.lower()].split("+")[0] == version, (name, package)
    assert {p: v for p, v in test.items() if p in demo} == demo
    assert int(test["transformers"].split(".")[1]) < 11 and test["transformers"].startswith("5.")
    left_out = re.findall(r"^([a-z0-9-]+); sys_platform == \"never\"$",
                          (REQUIREMENTS / "overrides.txt").read_text(encoding="utf-8"), re.MULTILINE)
    assert len(left_out) == 6 and not set(left_out) & set(test)
    assert test["torch"].endswith("+cpu")


def test_the_library_states_lower_bounds_only():
    """pyproject.toml pins nothing for users (no ``==``, ``<``, ``~=``, ``!=``); the lock does."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = [*project["dependencies"],
                    *(r for extra in project["optional-dependencies"].values() for r in extra)]
    assert requirements and not [r for r in requirements if re.search(r"==|<|~=|!=", r)]


def tracked_text_files() -> list[Path]:
    """The repository's own text files (git's list), data and lock files aside."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("needs a git checkout")
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    keep = (".py", ".md", ".sh", ".yaml", ".yml", ".toml", ".cfg", ".txt", "Makefile", "run")
    return [ROOT / n for n in names if n.endswith(keep) and not n.startswith(("benchmarks/data/",
                                                                           "examples/data/2wiki"))
            and (ROOT / n).is_file()]


def test_no_path_outside_the_repository():
    """No path into a sibling folder or a developer's machine: a clone must work anywhere."""
    pattern = re.compile(r"\.\./shared|/" + r"work/|/" + r"root/")
    offenders = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
                 for path in tracked_text_files()
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if pattern.search(line)]
    assert offenders == []


def method_sections() -> set[str]:
    """The section numbers of docs/method.md: "1" … "8" and "2.1" … "2.5"."""
    headings = re.findall(r"^#{2,3} (\d+(?:\.\d+)?)[. ]", METHOD.read_text(encoding="utf-8"),
                          re.MULTILINE)
    return set(headings)


def test_method_sections_cited_anywhere_exist_and_spec_is_not_cited():
    """Every ``docs/method.md §N`` (or ``§N–§M``, ``§N, §M``) in the repository names a section of
    docs/method.md; no file cites SPEC.md or STYLE.md, which are not in the repository."""
    sections = method_sections()
    assert {"1", "2", "2.1", "2.5", "3", "4", "5", "6", "7", "8"} <= sections
    cited, stale = set(), []
    for path in tracked_text_files():
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"docs/method\.md((?:[ ,]*(?:and |or )?§\d+(?:\.\d+)?(?:–§?\d+)?)+)", text):
            for first, last in re.findall(r"§(\d+(?:\.\d+)?)(?:–§?(\d+))?", match.group(1)):
                cited.add(first)
                if last:
                    cited.update(str(n) for n in range(int(first.split(".")[0]), int(last) + 1))
        if path.name != "test_repository.py":
            stale += [f"{path.relative_to(ROOT)}: {m}" for m in
                      re.findall(r"\b(?:SPEC|STYLE)(?:\.md)? ?§[\d.]+|\b(?:SPEC|STYLE)\.md\b", text)]
    assert cited and cited <= sections, sorted(cited - sections)
    assert stale == []


def test_method_describes_every_config_field_and_output_column():
    text = METHOD.read_text(encoding="utf-8")
    table = text[text.index("## Configuration fields"):]
    missing = [name for name in FactUtilConfig.model_fields if f"| `{name}` |" not in table]
    assert missing == []
    columns = text[text.index("### `factutil score"):text.index("### `factutil clusters")]
    fields = [f.name for f in dataclasses.fields(ActionRecord)]
    assert [name for name in fields if f"`{name}`" not in columns] == []
    for name, value in FactUtilConfig().model_dump().items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            row = next(line for line in table.splitlines() if line.startswith(f"| `{name}` |"))
            shown = row.split("|")[2].strip().replace("−", "-")
            assert float(shown) == value, (name, shown, value)


def test_method_worked_example_holds():
    """The numbers of docs/method.md §5's worked example, from its own formulas: u = ±0.25,
    F = tanh(0.25), back-credit 0.2 F, A_out = ±0.5 / (sqrt(0.5) + 1e-6), A = A_out + 0.5 r with
    the raw term, A = A_out + 0.5 (r - mean) / (std + 1e-6) with the default group-normalised one."""
    def rollout(rid: str, city: str) -> dict:
        return {"uid": "q", "question": "What is the capital of France?", "golden_answers": ["Paris"],
                "rollout_id": rid, "actions": [
                    {"action": "search", "query": "capital of France"},
                    {"action": "assert", "triples": [["France", "capital", city]]},
                    {"action": "answer", "answer": city}]}

    rollouts = [rollout("q-0", "Paris"), rollout("q-1", "Lyon")]
    result = compute_process_advantages(rollouts, FactUtilConfig(mode="exact", process_norm="none"))
    assert sorted(c.utility for c in result.clusters) == [-0.25, 0.25]
    gain = math.tanh(0.25)
    outcome = 0.5 / (math.sqrt(0.5) + 1e-6)
    expected = [outcome + 0.5 * r for r in (0.2 * gain, 0.8 * gain, 0.0)]
    expected += [-value for value in expected]
    assert result.action_columns["advantage"].tolist() == pytest.approx(expected, abs=1e-12)
    # The default normalises the six process rewards (mean 0) by their sample std.
    std = math.sqrt(2 * ((0.2 * gain) ** 2 + (0.8 * gain) ** 2) / 5)
    normalised = [outcome + 0.5 * r / (std + 1e-6) for r in (0.2 * gain, 0.8 * gain, 0.0)]
    normalised += [-value for value in normalised]
    default = compute_process_advantages(rollouts, FactUtilConfig(mode="exact"))
    assert default.action_columns["advantage"].tolist() == pytest.approx(normalised, abs=1e-12)
    shown = METHOD.read_text(encoding="utf-8")
    for value in (gain, 0.2 * gain, 0.8 * gain, outcome, *expected[:3], std, *normalised[:2]):
        assert f"{value:.5f}" in shown, value


def test_the_readme_lists_every_command():
    """Each ``factutil`` subcommand (and ``--version``) appears in the README's command list."""
    from factutil.cli import app

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    names = [command.name or command.callback.__name__ for command in app.registered_commands]
    assert "serve" in names
    assert [name for name in names if f"    factutil {name}" not in readme] == []
    assert "    factutil --version" in readme


def test_the_layers_of_the_architecture_hold():
    """`lint-imports` (the contracts in pyproject.toml, also run by `make lint`): method steps
    import no input model, worker form or surface, and pydantic only through the config; the
    data layer imports neither surfaces nor method steps."""
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "Contracts: 3 kept, 0 broken." in done.stdout


@make
def test_make_lint_checks_the_layers():
    commands = [command[-1:] for command in make_dry_run("lint")]
    assert [".venv/bin/lint-imports"] in commands


def test_a_trainer_internal_that_moved_is_named(tmp_path):
    """The adapters' README tables of trainer internals (tests/trainer_internals.py): a missing
    attribute and a changed signature are each one line naming the internal and the version."""
    from tests.trainer_internals import moved_internals

    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n## Trainer versions and internals\n\n| internal | use |\n|---|---|\n"
                      "| `pytest:approx(expected, rel, abs, nan_ok)` | kept |\n"
                      "| `pytest:raises(expected_exception)` | changed |\n"
                      "| `pytest:no_such_thing` | gone |\n\n## Tests\n", encoding="utf-8")
    problems = moved_internals(readme, "pytest")
    assert len(problems) == 2
    assert problems[0].startswith("pytest:raises takes (") and "as (expected_exception)" in problems[0]
    assert problems[1].startswith("pytest:no_such_thing is gone in pytest ")
    assert all(p.endswith("(see README.md, 'Trainer versions and internals')") for p in problems)
