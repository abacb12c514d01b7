#!/usr/bin/env bash
# FactAgent GRPO in verl 0.9–0.10 (>=0.9,<0.11; tested on 0.9.1; V1 trainer), the paper's setup
# (docs/method.md §7; the paper's Table 3): Qwen2.5-3B/7B-Instruct, n = 6 rollouts per question, at
# most 8 actions, Omega = 0.5, lr 1e-5, 128 questions a batch, temperature 0.7, KL loss 0.001, and
# factutil's defaults (the paper's: raw process rewards as the process advantage, duplicate-search
# penalty -0.01).
# Needs GPUs, vLLM, and a retriever:
#
#   pip install -e . -e integrations/verl            # factutil + factutil-verl (registers itself)
#   python -m factutil_verl check                     # the plugin is visible to verl
#   python examples/verl/prepare_data.py --out "$DATA" --train NQ.jsonl HOTPOTQA.json --val DEV.jsonl
#   factutil serve --corpus wiki-18.jsonl --port 8000 &   # or Search-R1's e5 retrieval_server.py
#   MODEL=Qwen/Qwen2.5-7B-Instruct NGPUS=8 bash examples/verl/run_factagent_grpo.sh [more overrides]
#
# factutil's lines: trainer.v1.trainer_mode=factutil, reward.custom_reward_function.path and
# +algorithm.factutil.* (agent_loop_config_path only to change the retriever URL or other loop
# options). Everything else is a plain Search-R1-style GRPO command; the data rows name the agent
# loop (agent_name=factagent).
#
# Groups whose rollouts all get the same reward carry no outcome signal; factutil's default prior
# (prior="group", docs/method.md §3) gives their facts utility 0, so plain GRPO as written here is
# safe. Dynamic sampling (DAPO: drop such groups, refill the batch) helps when many groups are
# uniform (a weak start, hard data); add verl's switch as extra arguments:
#   algorithm.filter_groups.enable=true algorithm.filter_groups.metric=reward
# The published method exactly (the paper's Beta(1/2, 1/2) prior; with dynamic sampling, as its
# Beta prior rewards every fact of an all-fail group, docs/method.md §7):
#   +algorithm.factutil.preset=paper
set -euo pipefail

MODEL=${MODEL:-Qwen/Qwen2.5-3B-Instruct}
DATA=${DATA:-$HOME/data/factagent}
NGPUS=${NGPUS:-8}
OMEGA=${OMEGA:-0.5}
HERE=$(cd "$(dirname "$0")" && pwd)

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    algorithm.norm_adv_by_std_in_grpo=true \
    algorithm.use_kl_in_reward=false \
    data.train_files="$DATA/train.parquet" \
    data.val_files="$DATA/val.parquet" \
    data.train_batch_size=128 \
    data.val_batch_size=256 \
    data.max_prompt_length=4096 \
    data.max_response_length=512 \
    data.filter_overlong_prompts=true \
    data.truncation=error \
    data.return_raw_chat=true \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.model.use_remove_padding=true \
    actor_rollout_ref.model.enable_gradient_checkpointing=true \
    actor_rollout_ref.actor.optim.lr=1e-5 \
    actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.285 \
    actor_rollout_ref.actor.ppo_mini_batch_size=64 \
    actor_rollout_ref.actor.use_dynamic_bsz=true \
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384 \
    actor_rollout_ref.actor.use_kl_loss=true \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.actor.fsdp_config.param_offload=true \
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=true \
    actor_rollout_ref.ref.fsdp_config.param_offload=true \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.5 \
    actor_rollout_ref.rollout.n=6 \
    actor_rollout_ref.rollout.temperature=0.7 \
    actor_rollout_ref.rollout.agent.agent_loop_config_path="$HERE/factagent.yaml" \
    trainer.use_v1=true \
    trainer.v1.trainer_mode=factutil \
    reward.custom_reward_function.path=pkg://factutil_verl.reward \
    +algorithm.factutil.omega="$OMEGA" \
    +algorithm.factutil.max_turns=8 \
    +algorithm.factutil.group_size=6 \
    trainer.critic_warmup=0 \
    trainer.logger='["console"]' \
    trainer.project_name=factutil \
    trainer.experiment_name="factagent-$(basename "$MODEL")-omega$OMEGA" \
    trainer.n_gpus_per_node="$NGPUS" \
    trainer.nnodes=1 \
    trainer.save_freq=100 \
    trainer.test_freq=50 \
    trainer.total_epochs=1 \
    trainer.total_training_steps=500 \
    "$@"
