#!/usr/bin/env bash
# FactAgent (Search–Assert–Answer) GRPO on OpenRLHF 0.11 with factutil's per-step process
# advantages: A = GRPO outcome advantage + omega * A_proc on each action's tokens (docs/method.md §5).
#
#   examples/openrlhf/run_factagent_2wiki.sh [--retriever-url URL] [--dry-run] [OpenRLHF args ...]
#
# The paper's setup (docs/method.md §7): Qwen2.5-7B, GRPO (group_norm) with n = 6 rollouts per
# question, at most 8 actions, semantic fact clusters, omega 0.5, alpha 0.2, lr 1e-5, temperature
# 0.7, and factutil's defaults (the paper's: raw process rewards as the process advantage,
# duplicate-search penalty -0.01); here on the 30 bundled 2Wiki questions and the local BM25
# retrieval server (start it first: `factutil serve`, POST /retrieve on 127.0.0.1:8000). One 8-GPU
# node, everything colocated. Needs: factutil, factutil-openrlhf, openrlhf==0.11.2 with its GPU stack.
#
# Groups whose rollouts all get the same reward carry no outcome signal; factutil's default prior
# (prior="group", docs/method.md §3) gives their facts utility 0, so plain GRPO as written here is
# safe. Dynamic sampling (drop such groups, refill the batch) helps when many groups are uniform
# (a weak start, hard data); OpenRLHF's switch, as extra arguments (keeps the groups whose mean
# reward lies strictly inside the range):
#   --algo.dynamic_filtering_enable --algo.dynamic_filtering_range 0 1
# The published method exactly (the paper's Beta(1/2, 1/2) prior; with dynamic sampling, as its
# Beta prior rewards every fact of an all-fail group, docs/method.md §7):
#   --factutil.preset paper
# Steps: 1. write the prompt dataset; 2. replay one sample rollout against the retriever (no GPU);
# 3. launch training (GPU). --dry-run skips 2 and prints the launch plan of 3 instead of running it.
# Any other argument is appended to OpenRLHF's (a repeated option: the last one wins).
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
RETRIEVER_URL=${RETRIEVER_URL:-http://127.0.0.1:8000/retrieve}
DRY_RUN=0
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --retriever-url) RETRIEVER_URL=$2; shift 2 ;;
    --retriever-url=*) RETRIEVER_URL=${1#*=}; shift ;;
    --dry-run) DRY_RUN=1; shift ;;
    *) EXTRA+=("$1"); shift ;;
  esac
done

MODEL=${MODEL:-Qwen/Qwen2.5-7B-Instruct}
OUT=${OUT:-out/openrlhf}
MODE=${MODE:-semantic}         # the paper's method; "exact" is its exact-match ablation
OMEGA=${OMEGA:-0.5}
ALPHA=${ALPHA:-0.2}
MAX_TURNS=${MAX_TURNS:-8}
N_SAMPLES=${N_SAMPLES:-6}
ROLLOUT_BATCH=${ROLLOUT_BATCH:-16}
GPUS=${GPUS:-8}

"$PYTHON" examples/openrlhf/make_prompts.py -o "$OUT/2wiki_prompts.jsonl" --max-turns "$MAX_TURNS"
if [ "$DRY_RUN" = 0 ]; then
  "$PYTHON" examples/openrlhf/factagent_agent.py --retriever-url "$RETRIEVER_URL"
fi

LAUNCH=(
  "$PYTHON" -m factutil_openrlhf.train_ppo_ray
  --factutil.mode "$MODE" --factutil.omega "$OMEGA" --factutil.alpha "$ALPHA"
  --factutil.max_turns "$MAX_TURNS" --factutil.group_size "$N_SAMPLES"
  --factutil.env "FACTAGENT_RETRIEVER_URL=$RETRIEVER_URL"
  --factutil.env "FACTAGENT_TURN_FORMAT=chatml"
  --actor.model_name_or_path "$MODEL"
  --train.agent_func_path examples/openrlhf/factagent_agent.py
  --data.prompt_dataset "$OUT/2wiki_prompts.jsonl"
  --data.input_key prompt --data.label_key label --data.apply_chat_template
  --algo.advantage.estimator group_norm
  --rollout.n_samples_per_prompt "$N_SAMPLES"
  --rollout.batch_size "$ROLLOUT_BATCH" --rollout.micro_batch_size 4
  --train.batch_size $((ROLLOUT_BATCH * N_SAMPLES)) --train.micro_batch_size 2
  --data.max_len 8192 --rollout.max_new_tokens 512 --rollout.temperature 0.7
  --algo.kl.use_loss --algo.kl.estimator k3 --algo.kl.init_coef 0.001
  --actor.adam.lr 1e-5 --train.num_episodes 1
  --actor.num_nodes 1 --actor.num_gpus_per_node "$GPUS"
  --ref.num_nodes 1 --ref.num_gpus_per_node "$GPUS"
  --vllm.num_engines $((GPUS / 2)) --vllm.tensor_parallel_size 2
  --vllm.gpu_memory_utilization 0.6 --vllm.enable_sleep --ds.enable_sleep --train.colocate_all
  --ds.zero_stage 3 --ds.param_dtype bf16 --actor.gradient_checkpointing_enable
  --eval.steps -1 --ckpt.save_steps -1 --ckpt.output_dir "$OUT/checkpoint"
  --logger.tensorboard_dir "$OUT/tensorboard"
)
if [ "$DRY_RUN" = 1 ]; then LAUNCH+=(--factutil.dry_run); fi
exec "${LAUNCH[@]}" ${EXTRA[@]+"${EXTRA[@]}"}
