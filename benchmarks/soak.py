"""Soak: many simulated training steps through the public API, one clusterer reused.

    python benchmarks/soak.py [--steps 1000] [--size S|M] [--mode semantic|exact]
                              [--every 100] [--seed 0] [--device cpu|cuda] [--set key=value ...]
                              [--json OUT.json]

Each step builds a fresh batch the way a trainer would: size M is 256 groups x 6 rollouts, each
rollout at most 8 actions holding about 6 triples (S: 32 groups). The texts are real: the 30
2WikiMultihopQA questions of ``examples/data`` with their gold facts in every wording the sample
uses (letter case, relation wording), their distractor facts, the real search queries, BM25
observations and raw model outputs of ``2wiki_rollouts.jsonl``; plus, for the stream of new facts
that real training brings every step, facts composed from real corpus titles and the gold
relations (so the embedding cache keeps meeting new texts and must evict to stay bounded). The
policy is seeded: a hidden skill per rollout sets how often it asserts the gold facts, repeats a
search, writes invalid text, answers right; a few rollouts act after their answer or never answer.

One ``SemanticClusterer`` (embedding cache on, bounded by ``cache_max_entries`` /
``cache_max_bytes``) serves every step, as a trainer would hold it. Every ``--every`` steps the
script prints the process RSS, the cache's entries and bytes, seconds per step and the warning
counts (factutil's warnings by kind, and Python warnings); at the end, RSS growth after the first
report, which must stay within the cache's bound.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import re
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from factutil import FactUtilConfig, compute_process_advantages
from factutil.cluster import make_clusterer
from factutil.parse import parse_action

DATA = ROOT / "examples" / "data"
SIZES = {"S": 32, "M": 256}
ROLLOUTS = 6
MAX_ACTIONS = 8

# Other wordings of the gold relations (real Wikidata verbalisations; the filters know them).
WORDINGS = {
    "director": ["directed by", "film director", "Director"],
    "place of birth": ["born in", "birthplace", "was born in"],
    "place of death": ["died in", "place of death is", "Place of death"],
    "date of death": ["died on", "death date"],
    "spouse": ["married to", "husband or wife", "Spouse"],
    "father": ["father is", "has father"],
    "mother": ["mother is", "has mother"],
    "child": ["has child", "parent of"],
    "country of citizenship": ["citizen of", "nationality"],
    "award received": ["won award", "received award"],
    "cause of death": ["died of", "cause of death was"],
    "performer": ["performed by", "Performer"],
    "employer": ["employed by", "works for"],
}


def rss_mib() -> float:
    """Resident set size of this process in MiB."""
    try:
        import psutil

        return psutil.Process().memory_info().rss / 2**20
    except ImportError:  # pragma: no cover - psutil comes with the test extras
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Material:
    """The real texts every step draws from."""

    def __init__(self) -> None:
        gold = json.loads((DATA / "2wiki_gold.json").read_text(encoding="utf-8"))
        sample = [json.loads(line) for line in
                  (DATA / "2wiki_rollouts.jsonl").read_text(encoding="utf-8").splitlines()]
        corpus = json.loads((DATA / "hipporag_2wikimultihopqa_corpus.json").read_text(encoding="utf-8"))
        self.questions = []
        for uid, entry in sorted(gold.items()):
            searches = [a for line in sample if line["uid"] == uid for a in line["actions"]
                        if a.get("action") == "search"]
            # Raw model outputs that do not answer (an answer would end the rollout early).
            raws = [a for line in sample if line["uid"] == uid for a in line["actions"]
                    if "raw" in a and parse_action(a["raw"]).action != "answer"]
            self.questions.append({
                "question": entry["question"], "answer": entry["answer"],
                "gold": [tuple(t) for t in entry["gold"]],
                "evidences": [tuple(t) for t in entry["evidences"]],
                "distractors": [tuple(d["triple"]) for d in entry["distractor_sources"]],
                "searches": searches, "raws": raws,
            })
        self.titles = sorted({doc["title"] for doc in corpus})
        years = sorted({int(y) for doc in corpus for y in re.findall(r"\b(1[5-9]\d\d|20[0-2]\d)\b",
                                                                     doc["text"])})
        self.years = [str(y) for y in years]
        self.relations = sorted(WORDINGS)
        self.wrong_answers = sorted({t[2] for q in self.questions for t in q["distractors"]})


def _variant(triple: tuple, rng: np.random.Generator) -> list[str]:
    """The triple as written (60 %), in another letter case (20 %) or relation wording (20 %)."""
    subject, relation, obj = triple
    roll = rng.random()
    if roll < 0.6:
        return [subject, relation, obj]
    if roll < 0.8:
        return [[subject.lower(), relation, obj], [subject, relation.upper(), obj],
                [subject.upper(), relation.title(), obj.lower()]][int(rng.integers(3))]
    wordings = WORDINGS.get(relation.casefold(), [relation])
    return [subject, wordings[int(rng.integers(len(wordings)))], obj]


def _novel(material: Material, rng: np.random.Generator) -> list[str]:
    """A fact of another question: a real corpus title, a gold relation, a title or a year."""
    titles = material.titles
    relation = material.relations[int(rng.integers(len(material.relations)))]
    if "date" in relation:
        obj = material.years[int(rng.integers(len(material.years)))]
    else:
        obj = titles[int(rng.integers(len(titles)))]
    return [titles[int(rng.integers(len(titles)))], relation, obj]


def build_rollout(material: Material, question: dict, uid: str, index: int,
                  rng: np.random.Generator) -> dict:
    """One rollout: searches, asserts of ~6 triples in all, an answer; seeded policy."""
    skill = rng.beta(2, 2)
    budget = int(rng.integers(4, 9))  # triples to assert, ~6 on average
    actions: list[dict] = []
    held_gold = 0
    searches = question["searches"]
    while len(actions) < MAX_ACTIONS - 1 and budget > 0:
        roll = rng.random()
        if roll < 0.06 * (1.5 - skill) and question["raws"]:
            actions.append(dict(question["raws"][int(rng.integers(len(question["raws"])))]))
            continue
        if roll < 0.09 * (1.5 - skill):
            actions.append({"raw": ['{"action": "search", "query": "', "<answer>", "I think",
                                    '{"action": "assert", "facts": [["a", "", "b"]]}'][int(rng.integers(4))]})
            continue
        search = searches[int(rng.integers(len(searches)))] if searches else {
            "action": "search", "query": question["question"]}
        if actions and rng.random() < 0.1 * (1.5 - skill):  # a repeated search
            earlier = [a for a in actions if a.get("action") == "search"]
            search = earlier[-1] if earlier else search
        actions.append(dict(search))
        triples = []
        for _ in range(min(budget, int(rng.integers(1, 4)))):
            if rng.random() < 0.35 + 0.5 * skill:
                fact = question["evidences"][int(rng.integers(2))]
                held_gold += 1
                triples.append(_variant(fact, rng))
            elif rng.random() < 0.5 and question["distractors"]:
                triples.append(list(question["distractors"][int(rng.integers(len(question["distractors"])))]))
            else:
                triples.append(_novel(material, rng))
        budget -= len(triples)
        actions.append({"action": "assert", "triples": triples})
    if rng.random() < 0.95:  # some rollouts run out of turns without answering
        right = rng.random() < (0.15 + 0.35 * min(held_gold, 2)) * (0.5 + skill)
        answer = question["answer"] if right else material.wrong_answers[
            int(rng.integers(len(material.wrong_answers)))]
        if rng.random() < 0.2:
            answer = answer.lower() + "."
        actions = actions[: MAX_ACTIONS - 1] + [{"action": "answer", "answer": answer}]
        if rng.random() < 0.02:  # an action after the answer (ignored, with a warning)
            actions.append(dict(searches[0]) if searches else {"action": "search", "query": "more"})
    return {"uid": uid, "question": question["question"], "golden_answers": [question["answer"]],
            "rollout_id": f"{uid}-{index}", "actions": actions}


def build_step(material: Material, step: int, groups: int, rng: np.random.Generator) -> list[dict]:
    """One training batch: ``groups`` questions x 6 rollouts, fresh dicts."""
    rows = []
    for g in range(groups):
        question = material.questions[int(rng.integers(len(material.questions)))]
        uid = f"s{step}-g{g}"
        rows.extend(build_rollout(material, question, uid, i, rng) for i in range(ROLLOUTS))
    return rows


class _Counter(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.kinds: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "one rollout" in message:
            kind = "one rollout"
        elif "ignored" in message:
            kind = "actions ignored"
        elif "skipped" in message:
            kind = "group skipped"
        elif "group_size" in message:
            kind = "group size"
        else:
            kind = "other"
        self.kinds[kind] += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--size", choices=sorted(SIZES), default="M")
    parser.add_argument("--mode", choices=["semantic", "exact"], default="semantic")
    parser.add_argument("--every", type=int, default=100, help="report every N steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None, help="embedding device (default: CUDA if present)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="any FactUtilConfig field, e.g. --set cache_max_entries=20000")
    parser.add_argument("--json", type=Path, default=None, help="write the reports here")
    args = parser.parse_args(argv)

    import yaml

    fields = {"mode": args.mode}
    if args.device:
        fields["embedding_device"] = args.device
    for item in args.set:
        key, _, value = item.partition("=")
        fields[key.strip()] = yaml.safe_load(value)
    config = FactUtilConfig(**fields)
    material = Material()
    rng = np.random.default_rng(args.seed)
    clusterer = make_clusterer(config)

    counter = _Counter()
    log = logging.getLogger("factutil")
    log.addHandler(counter)
    log.propagate = False
    python_warnings: Counter[str] = Counter()
    reports = []
    start_rss = rss_mib()
    print(f"soak: {args.steps} steps, size {args.size} ({SIZES[args.size]} groups x {ROLLOUTS} "
          f"rollouts), mode {config.mode}, RSS at start {start_rss:.0f} MiB", flush=True)
    print(f"{'step':>6} {'RSS MiB':>8} {'cache n':>8} {'cache MiB':>9} {'s/step':>7} "
          f"{'actions':>8} {'clusters':>8} {'warnings (factutil by kind; python)'}", flush=True)
    window_time, window_steps, started = 0.0, 0, time.perf_counter()
    last = None
    for step in range(1, args.steps + 1):
        rows = build_step(material, step, SIZES[args.size], rng)
        clock = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = compute_process_advantages(rows, config, clusterer=clusterer)
        window_time += time.perf_counter() - clock
        window_steps += 1
        for item in caught:
            python_warnings[f"{item.category.__name__}: {str(item.message)[:60]}"] += 1
        if not np.all(np.isfinite(result.advantages)):
            raise SystemExit(f"step {step}: non-finite advantage")
        last = result
        del rows, result
        if step % args.every == 0 or step == 1:
            gc.collect()
            cache = getattr(clusterer, "cache", None)
            report = {
                "step": step, "rss_mib": round(rss_mib(), 1),
                "cache_entries": len(cache) if cache is not None else 0,
                "cache_mib": round(cache.nbytes / 2**20, 1) if cache is not None else 0.0,
                "seconds_per_step": round(window_time / window_steps, 3),
                "actions": int(last.metrics["actions"]), "clusters": int(last.metrics["clusters"]),
                "warnings": dict(counter.kinds), "python_warnings": sum(python_warnings.values()),
            }
            reports.append(report)
            kinds = ", ".join(f"{k} {v}" for k, v in sorted(counter.kinds.items())) or "none"
            print(f"{step:>6} {report['rss_mib']:>8.0f} {report['cache_entries']:>8} "
                  f"{report['cache_mib']:>9.1f} {report['seconds_per_step']:>7.3f} "
                  f"{report['actions']:>8} {report['clusters']:>8} {kinds}; "
                  f"{report['python_warnings']}", flush=True)
            window_time, window_steps = 0.0, 0
            if args.json:  # after every report, so a run stopped early keeps what it measured
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                                 "reports": reports}, indent=1))
    total = time.perf_counter() - started
    first, final = reports[0], reports[-1]
    growth = final["rss_mib"] - first["rss_mib"]
    bound = (config.cache_max_bytes / 2**20) if config.mode == "semantic" else 0.0
    print(f"done: {args.steps} steps in {total:.0f} s; RSS {first['rss_mib']:.0f} -> "
          f"{final['rss_mib']:.0f} MiB (growth {growth:+.0f} MiB; cache holds "
          f"{final['cache_mib']:.1f} MiB, bound {bound:.0f} MiB)")
    for name, count in python_warnings.most_common():
        print(f"python warning x{count}: {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
