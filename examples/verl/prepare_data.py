"""Turn NQ/HotpotQA-style question files into verl parquet for the ``factagent`` loop.

Input: JSONL (one question per line) or a JSON array, each record with a ``question`` and gold
answers under ``golden_answers`` (FlashRAG/Search-R1), ``answer`` (HotpotQA, 2Wiki, R1-Searcher)
or ``answers``; an id under ``id``, ``_id`` or ``idx`` is kept. Output: one parquet per split with
verl's columns::

    data_source   "nq", "hotpotqa", ... (the --source given, else the input file's folder name)
    prompt        [{"role": "user", "content": question}]
    ability       "fact-reasoning"
    reward_model  {"style": "rule", "ground_truth": {"target": [answers]}}
    extra_info    {"split", "index", "id", "question"}
    agent_name    "factagent"

Example with the question files bundled in the repository (100 HotpotQA and 100 MuSiQue train
questions, 30 2Wiki dev questions); the paper trains on NQ + HotpotQA, pass those files the same
way::

    python examples/verl/prepare_data.py --out data/factagent \
        --train benchmarks/data/hipporag_hotpotqa_train100.json \
                benchmarks/data/hipporag_musique_train100.json \
        --val examples/data/2wiki_dev_compositional30_evidences.jsonl

Records without a question or a non-blank answer are skipped and counted. Deterministic: records
keep file order (``--shuffle SEED`` shuffles with a seeded generator).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

AGENT_NAME = "factagent"
ABILITY = "fact-reasoning"


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    """Records of a JSONL file or a JSON array (raises ValueError naming ``FILE:LINE``)."""
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        yield from json.loads(text)
        return
    for line_no, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                yield json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{line_no}: not valid JSON: {error}") from None


def answers_of(record: dict[str, Any]) -> list[str]:
    """Gold answers of a record: ``golden_answers``, ``answer`` or ``answers``; blanks dropped."""
    for key in ("golden_answers", "answers", "answer"):
        value = record.get(key)
        if value is None:
            continue
        values = value if isinstance(value, list) else [value]
        return [str(v).strip() for v in values if str(v).strip()]
    return []


def to_rows(
    records: Iterable[dict[str, Any]], source: str, split: str, start: int = 0
) -> tuple[list[dict[str, Any]], int]:
    """verl rows of ``records``; returns (rows, number skipped)."""
    rows, skipped = [], 0
    for record in records:
        question = str(record.get("question") or "").strip()
        answers = answers_of(record)
        if not question or not answers:
            skipped += 1
            continue
        index = start + len(rows)
        record_id = record.get("id", record.get("_id", record.get("idx", index)))
        rows.append(
            {
                "data_source": source,
                "prompt": [{"role": "user", "content": question}],
                "ability": ABILITY,
                "reward_model": {"style": "rule", "ground_truth": {"target": answers}},
                "extra_info": {
                    "split": split,
                    "index": index,
                    "id": str(record_id),
                    "question": question,
                },
                "agent_name": AGENT_NAME,
            }
        )
    return rows, skipped


def build_split(
    paths: list[Path], split: str, source: str | None, limit: int | None
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in paths:
        records = list(read_records(path))
        if limit is not None:
            records = records[:limit]
        new, skipped = to_rows(
            records, source or path.parent.name or path.stem, split, start=len(rows)
        )
        rows.extend(new)
        print(f"{split}: {path}: {len(new)} questions ({skipped} skipped)", file=sys.stderr)
    return rows


def write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--train", type=Path, nargs="+", required=True, help="question files for train.parquet"
    )
    parser.add_argument(
        "--val", type=Path, nargs="*", default=[], help="question files for val.parquet"
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument(
        "--source", help="data_source of every row (default: each file's folder name)"
    )
    parser.add_argument("--train-limit", type=int, help="first N records of each train file")
    parser.add_argument("--val-limit", type=int, help="first N records of each val file")
    parser.add_argument(
        "--shuffle", type=int, metavar="SEED", help="shuffle train rows with this seed"
    )
    args = parser.parse_args(argv)
    try:
        train = build_split(args.train, "train", args.source, args.train_limit)
        val = build_split(args.val, "val", args.source, args.val_limit)
    except (OSError, ValueError) as error:
        print(f"prepare_data: {error}", file=sys.stderr)
        return 2
    if not train:
        print("prepare_data: no usable train question", file=sys.stderr)
        return 2
    if args.shuffle is not None:
        random.Random(args.shuffle).shuffle(train)
    write_parquet(train, args.out / "train.parquet")
    if val:
        write_parquet(val, args.out / "val.parquet")
    print(f"wrote {len(train)} train and {len(val)} val rows to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
