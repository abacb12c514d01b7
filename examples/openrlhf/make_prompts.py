"""Write the OpenRLHF prompt dataset for the FactAgent example (``--data.prompt_dataset``).

One JSON line per question of ``examples/data/2wiki_dev_compositional30_evidences.jsonl`` (30
real 2WikiMultihopQA dev questions): ``{"prompt": <FactAgent instruction + question>, "label":
<JSON list of gold answers>, "datasource": "2wiki"}``, read by OpenRLHF with ``--data.input_key
prompt --data.label_key label`` (and ``--data.apply_chat_template`` for chat models). A smoke-size
dataset, not the paper's NQ + HotpotQA training set (not bundled).

    python examples/openrlhf/make_prompts.py -o out/openrlhf/2wiki_prompts.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "2wiki_dev_compositional30_evidences.jsonl"

INSTRUCTION = """You are a search agent. Answer the question with the help of a Wikipedia search \
tool. Work in turns; in each turn write exactly one action as JSON:
{{"action": "search", "query": "..."}}  search Wikipedia; the passages come back in <observation>
{{"action": "assert", "facts": [["subject", "relation", "object"], ...]}}  keep facts from the latest \
passages in your fact store
{{"action": "answer", "answer": "..."}}  the final short answer, from the facts you stored
You may take at most {max_turns} actions.
Question: {question}"""


def prompt_lines(path: Path = DATA, max_turns: int = 8) -> list[dict[str, str]]:
    """The dataset rows, in file order (deterministic)."""
    rows = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            item = json.loads(line)
            rows.append(
                {
                    "prompt": INSTRUCTION.format(max_turns=max_turns, question=item["question"]),
                    "label": json.dumps([item["answer"]], ensure_ascii=False),
                    "datasource": "2wiki",
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--out", type=Path, default=Path("out/openrlhf/2wiki_prompts.jsonl"))
    parser.add_argument("--max-turns", type=int, default=8)
    args = parser.parse_args(argv)
    rows = prompt_lines(max_turns=args.max_turns)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    print(f"wrote {len(rows)} prompts to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
