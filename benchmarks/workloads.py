"""Reference training-step workloads S / M / L / XL built from real facts.

Each group is one question: its fact family comes from the labelled clustering sets in
``benchmarks/data`` (real 2Wiki / MuSiQue / HotpotQA facts with their paraphrases, look-alikes and
facts of other questions). S / M / L are 64 / 256 / 512 groups × 6 rollouts; XL is
4,096 groups × 8 rollouts (the scale at which to watch how a step grows). Families repeat every ~100 groups; to keep the facts of different
questions distinct, the family's subjects are renamed in each repeat to real paragraph titles of
the bundled 2Wiki corpus (letter case and inverse forms of a subject lose their link then: the
repeats are a little harder to cluster than the originals). A seeded policy then writes 6 rollouts per group, each ≤ 8 actions
holding ~6 triples in all, with the repetition and paraphrasing across rollouts that real rollouts
show (the same fact found by several rollouts, often in other words).

    from benchmarks.workloads import build_workload
    rows = build_workload("L")        # list of rollout dicts (docs/method.md §8 lines)
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SETS = [ROOT / "benchmarks/data/cluster_quality_set.jsonl", ROOT / "benchmarks/data/cluster_quality_heldout.jsonl"]
CORPUS = ROOT / "examples/data/hipporag_2wikimultihopqa_corpus.json"
SIZES = {"S": 64, "M": 256, "L": 512, "XL": 4096}
ROLLOUTS = 6
ROLLOUTS_PER_SIZE = {"XL": 8}  # rollouts per group where it is not ROLLOUTS
MAX_ACTIONS = 8


@lru_cache(maxsize=1)
def families() -> list[list[dict]]:
    """The fact families: per labelled group, its items (base, paraphrase, look-alike, distractor)."""
    by_group: dict[str, list[dict]] = {}
    for path in SETS:
        for line in path.read_text(encoding="utf-8").splitlines():
            item = json.loads(line)
            by_group.setdefault(f"{path.stem}:{item['group']}", []).append(item)
    return [by_group[key] for key in sorted(by_group)]


@lru_cache(maxsize=1)
def titles() -> list[str]:
    """Real paragraph titles of the bundled 2Wiki corpus, sorted, distinct."""
    corpus = json.loads(CORPUS.read_text(encoding="utf-8"))
    return sorted({doc["title"] for doc in corpus})


def _renamed(items: list[dict], start: int | None) -> list[dict]:
    """Give every subject of the family a real corpus title (the same one wherever it recurs)."""
    if start is None:
        return items
    names = titles()
    mapping: dict[str, str] = {}
    for item in items:
        mapping.setdefault(item["subject"].casefold(), names[(start + 7919 * len(mapping)) % len(names)])
    return [{**item, "subject": mapping[item["subject"].casefold()]} for item in items]


def build_group(index: int, rng: np.random.Generator, rollouts: int = ROLLOUTS) -> list[dict]:
    """The ``rollouts`` rollouts of group ``index``."""
    family_list = families()
    cycle, position = divmod(index, len(family_list))
    items = _renamed(family_list[position], index * 104729 if cycle else None)
    base = [i for i in items if i["kind"] == "base" and not i["distractor"]]
    gold = base[-1]["object"]
    weights = np.array([
        6.0 if i["kind"] == "base" and not i["distractor"]
        else 2.5 if i["kind"].startswith("paraphrase")
        else 1.0 for i in items
    ])
    weights /= weights.sum()
    uid = f"step-{index:04d}"
    question = f"What is the {base[-1]['relation']} of the entity in question {index}?"
    written = []
    for r in range(rollouts):
        actions: list[dict] = []
        held: set[str] = set()
        budget = int(rng.integers(5, 10))  # ~6 triples per rollout (at most 3 asserts of 1-3)
        while budget > 0 and len(actions) < MAX_ACTIONS - 2:
            actions.append({"action": "search", "query": f"{base[0]['subject']} {rng.integers(3)}",
                            "observation": "(retrieved passage)"})
            take = min(budget, int(rng.integers(1, 4)))
            picks = rng.choice(len(items), size=take, p=weights)
            triples = [[items[p]["subject"], items[p]["relation"], items[p]["object"]] for p in picks]
            held.update(items[p]["label"] for p in picks)
            actions.append({"action": "assert", "triples": triples})
            budget -= take
        found = sum(b["label"] in held for b in base) / len(base)
        correct = rng.random() < 0.15 + 0.7 * found
        actions.append({"action": "answer", "answer": gold if correct else items[int(rng.integers(len(items)))]["object"]})
        written.append({"uid": uid, "question": question, "golden_answers": [gold],
                        "rollout_id": f"{uid}-{r}", "actions": actions})
    return written


def build_workload(size: str, seed: int = 0) -> list[dict]:
    """All rollouts of workload ``size`` (S = 64, M = 256, L = 512 groups of 6 rollouts; XL = 4,096
    groups of 8), deterministic. Raises ValueError naming ``size`` for an unknown one."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {list(SIZES)}, got {size!r}")
    rng = np.random.default_rng(seed)
    rollouts = ROLLOUTS_PER_SIZE.get(size, ROLLOUTS)
    return [row for index in range(SIZES[size]) for row in build_group(index, rng, rollouts)]


def triple_occurrences(rows: list[dict]) -> list[list[str]]:
    """Every asserted triple occurrence, in order."""
    return [t for row in rows for a in row["actions"] if a["action"] == "assert" for t in a["triples"]]
