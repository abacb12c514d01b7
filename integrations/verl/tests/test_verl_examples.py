"""examples/verl and the README lines: every key exists in verl 0.9's config and validates."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
from verl.utils.import_utils import load_extern_object
from verl_testkit import REPO, make_byte_tokenizer

from factutil_verl.config import (
    FactAgentLoopConfig,
    SearchR1LoopConfig,
    agent_loop_config,
    factutil_config_from_verl,
)
from factutil_verl.reward import compute_score

EXAMPLES = REPO / "examples" / "verl"
README = REPO / "integrations" / "verl" / "README.md"


def script_overrides() -> list[str]:
    """The Hydra overrides of run_factagent_grpo.sh, with its variables filled in."""
    text = (EXAMPLES / "run_factagent_grpo.sh").read_text(encoding="utf-8")
    command = text[text.index("python3 -m verl.trainer.main_ppo") :].replace("\\\n", " ")
    command = command.replace('$(basename "$MODEL")', "Qwen2.5-3B-Instruct")
    for name, value in {
        "MODEL": "Qwen/Qwen2.5-3B-Instruct",
        "DATA": "/data",
        "NGPUS": "8",
        "OMEGA": "0.5",
        "HERE": str(EXAMPLES),
    }.items():
        command = command.replace(f"${name}", value)
    words = shlex.split(command)
    return [word for word in words[3:] if "=" in word]


def test_the_run_script_composes_against_verls_config(verl_config):
    overrides = script_overrides()
    assert len(overrides) > 40
    config = verl_config(*overrides)  # Hydra refuses any key verl 0.9 does not have
    assert config.trainer.use_v1 and config.trainer.v1.trainer_mode == "factutil"
    assert config.algorithm.adv_estimator == "grpo" and config.actor_rollout_ref.rollout.n == 6
    factutil = factutil_config_from_verl(config.algorithm)
    assert (factutil.omega, factutil.max_turns, factutil.group_size) == (0.5, 8, 6)
    reward = config.reward.custom_reward_function
    assert load_extern_object(reward.path, reward.name) is compute_score  # verl's own loader
    assert config.actor_rollout_ref.rollout.agent.agent_loop_config_path == str(
        EXAMPLES / "factagent.yaml"
    )
    assert (
        subprocess.run(
            ["bash", "-n", str(EXAMPLES / "run_factagent_grpo.sh")], check=False
        ).returncode
        == 0
    )


def test_the_optional_lines_the_run_script_names_compose(verl_config):
    """The overrides its comments offer (verl's dynamic sampling; the paper preset) exist in
    verl 0.9's config and reach verl and factutil as meant."""
    text = (EXAMPLES / "run_factagent_grpo.sh").read_text(encoding="utf-8")
    optional = [word for line in text.splitlines() if line.startswith("#   ")
                and "algorithm." in line for word in shlex.split(line[1:])]
    assert optional == ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=reward",
                        "+algorithm.factutil.preset=paper"]
    config = verl_config(*script_overrides(), *optional)
    assert config.algorithm.filter_groups.enable and config.algorithm.filter_groups.metric == "reward"
    factutil = factutil_config_from_verl(config.algorithm)
    assert (factutil.preset, factutil.prior, factutil.process_norm) == ("paper", "beta", "none")
    plain = factutil_config_from_verl(verl_config(*script_overrides()).algorithm)
    assert (plain.preset, plain.prior, plain.process_norm, plain.repeat_search_penalty) == (
        "default", "group", "group", -0.01)


def test_the_readme_lines_are_three_and_compose(verl_config):
    block = re.search(
        r"and add these lines:\n\n```\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL
    )
    lines = block.group(1).strip().splitlines()
    assert len(lines) <= 3
    config = verl_config("algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=6", *lines)
    assert config.trainer.v1.trainer_mode == "factutil"
    assert factutil_config_from_verl(config.algorithm).omega == 0.5


@pytest.mark.parametrize("name,model", [("factagent", FactAgentLoopConfig),
                                        ("search_r1", SearchR1LoopConfig)])
def test_the_agent_loop_yaml_matches_the_registration_and_validates(name, model):
    entries = OmegaConf.load(EXAMPLES / f"{name}.yaml")
    assert len(entries) == 1
    entry = OmegaConf.to_container(entries[0])
    assert entry.pop("name") == name
    assert entry.pop("_target_") == _agent_loop_registry[name]["_target_"]
    options = agent_loop_config(entry, model, name)
    assert options == model()  # the file spells out the defaults
    assert options.retriever_url == "http://127.0.0.1:8000/retrieve" and options.max_turns is None


def documented_prepare_data_commands() -> list[list[str]]:
    """The ``prepare_data.py`` command lines of the adapter README and of the script's docstring."""
    commands = []
    for text in (README.read_text(encoding="utf-8"),
                 (EXAMPLES / "prepare_data.py").read_text(encoding="utf-8")):
        start = text.index("    python examples/verl/prepare_data.py")
        lines = []
        for line in text[start:].splitlines():
            lines.append(line.rstrip("\\ "))
            if not line.endswith("\\"):
                break
        commands.append(shlex.split(" ".join(lines)))
    return commands


def test_the_documented_prepare_data_commands_run_on_a_clone(tmp_path: Path):
    """Both documented commands name only files bundled in the repository (none outside it) and
    run from the repository root: 100 HotpotQA + 100 MuSiQue train questions, 30 2Wiki dev."""
    readme, docstring = documented_prepare_data_commands()
    for command in (readme, docstring):
        assert command[:2] == ["python", "examples/verl/prepare_data.py"]
        out = command.index("--out") + 1
        command[out] = str(tmp_path / Path(command[out]).name)
        files = [word for word in command if word.endswith((".json", ".jsonl"))]
        assert len(files) == 3 and all((REPO / word).is_file() for word in files), files
        done = subprocess.run([sys.executable, *command[1:]], cwd=REPO, capture_output=True,
                              text=True, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("wrote 200 train and 30 val rows to ")


def test_prepare_data_writes_parquet_that_verls_dataset_reads(tmp_path: Path, verl_config):
    pd = pytest.importorskip("pandas")
    from verl.utils.dataset.rl_dataset import RLHFDataset

    nq = tmp_path / "nq" / "questions.jsonl"
    nq.parent.mkdir()
    nq.write_text(
        json.dumps(
            {
                "id": "test_0",
                "question": "who got the first nobel prize in physics",
                "golden_answers": ["Wilhelm Conrad Röntgen"],
            }
        )
        + "\n"
        + json.dumps({"id": "test_1", "question": "  ", "golden_answers": ["x"]})
        + "\n",
        encoding="utf-8",
    )
    two_wiki = REPO / "examples" / "data" / "2wiki_dev_compositional30_evidences.jsonl"
    out = tmp_path / "out"
    completed = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "prepare_data.py"),
            "--out",
            str(out),
            "--train",
            str(nq),
            str(two_wiki),
            "--val",
            str(two_wiki),
            "--val-limit",
            "5",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    assert "train: " in completed.stderr and "(1 skipped)" in completed.stderr
    train = pd.read_parquet(out / "train.parquet")
    assert len(train) == 31 and len(pd.read_parquet(out / "val.parquet")) == 5
    assert list(train.columns) == [
        "data_source",
        "prompt",
        "ability",
        "reward_model",
        "extra_info",
        "agent_name",
    ]
    first = train.iloc[0]
    assert first["data_source"] == "nq" and first["agent_name"] == "factagent"
    assert list(first["reward_model"]["ground_truth"]["target"]) == ["Wilhelm Conrad Röntgen"]
    assert first["extra_info"]["question"] == "who got the first nobel prize in physics"
    assert train.iloc[1]["data_source"] == "data"  # the folder name of the 2Wiki file

    config = verl_config("data.max_prompt_length=512", "data.filter_overlong_prompts=true")
    dataset = RLHFDataset(str(out / "train.parquet"), make_byte_tokenizer(), config.data)
    row = dataset[0]
    assert row["agent_name"] == "factagent"
    assert row["raw_prompt"] == [
        {"role": "user", "content": "who got the first nobel prize in physics"}
    ]
    assert (
        compute_score(
            row["data_source"],
            "<answer>Wilhelm Conrad Röntgen</answer>",
            row["reward_model"]["ground_truth"],
        )["score"]
        == 1.0
    )
