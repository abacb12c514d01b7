"""Build the bundled 2WikiMultihopQA rollout sample (the input file of docs/method.md §8) from real data.

Reads only files in ``examples/data/``:

- ``2wiki_dev_compositional30_evidences.jsonl``: 30 real 2Wiki dev questions, each with its answer
  and two gold evidence triples ``[subject, relation, object]``;
- ``hipporag_2wikimultihopqa_corpus.json``: 6,119 real 2Wiki paragraphs ``{title, text}``.

Writes, in the same folder:

- ``2wiki_rollouts.jsonl``: one rollout per line, a group of 6 rollouts per question (180 in all);
- ``2wiki_gold.json``: per uid, every surface form of the gold triples that the rollouts assert,
  where each distractor triple came from, and each rollout's hidden skill.

The questions, answers, triples and paragraphs are real; the *policy* is simulated. Each rollout
draws a hidden skill from one seeded ``numpy`` Generator; the skill sets how often it asserts the
gold triples (sometimes in another letter case or another wording of the relation), how many
distractor triples (real evidences of *other* questions) it asserts, and how often it emits an
invalid action or repeats a search. A fixed share of rollouts never answers or answers from an
empty store. Searches are real: BM25 (``bm25s``) over title + text of the corpus, and the
observation is the top 3 paragraphs as ``Doc 1 (Title: ...) text``. The corpus does not hold these
questions' gold paragraphs, so observations are real but mostly off-topic paragraphs.

Same output bytes on every run. Regenerate with ``.venv/bin/python examples/build_2wiki_sample.py``.
"""

from __future__ import annotations

import argparse
import json
import re
import string
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import bm25s
import numpy as np
from bm25s.tokenization import Tokenizer

SEED = 2026
GROUP_SIZE = 6
MAX_ACTIONS = 8
TOP_K = 3
NEVER_ANSWER = 9  # rollouts (of 180) that run out of actions without answering
EMPTY_STORE_ANSWER = 9  # rollouts (of 180) that answer before any assert

PUNCTUATION = frozenset(string.punctuation)
T = TypeVar("T")

DATA_DIR = Path(__file__).resolve().parent / "data"
QUESTIONS_FILE = DATA_DIR / "2wiki_dev_compositional30_evidences.jsonl"
CORPUS_FILE = DATA_DIR / "hipporag_2wikimultihopqa_corpus.json"
ROLLOUTS_FILE = DATA_DIR / "2wiki_rollouts.jsonl"
GOLD_FILE = DATA_DIR / "2wiki_gold.json"

# Other wordings of each 2Wiki relation; exact-match clustering keeps them apart.
RELATION_WORDINGS = {
    "director": ("directed by", "film director"),
    "performer": ("performed by", "sung by"),
    "mother": ("has mother", "mother is"),
    "father": ("has father", "father is"),
    "spouse": ("married to", "spouse is"),
    "child": ("has child", "parent of"),
    "place of birth": ("born in", "birthplace"),
    "place of death": ("died in", "death place"),
    "date of death": ("died on", "death date"),
    "cause of death": ("died of", "death cause"),
    "country of citizenship": ("citizen of", "nationality"),
    "award received": ("won award", "received award"),
    "employer": ("worked at", "employed by"),
}

SEARCH_PREAMBLES = (
    "I will search next.",
    "I need more information. Let me search for \"{query}\".",
    "The store is missing a fact; searching.",
)
ASSERT_PREAMBLES = (
    "The documents support these facts.",
    "I will record what I found.",
    "Adding to the fact store:",
)
ANSWER_PREAMBLES = (
    "I have enough facts to answer.",
    "Based on the stored facts, the answer follows.",
)
PROSE_WITHOUT_ACTION = (
    "I need to figure out {topic} before I can answer.",
    "Let me think step by step about {topic}.",
    "The documents do not mention {topic} directly, so I should be careful here.",
    "Okay, the question is about {topic}. Hmm, which document was that again",
)


def load_questions(path: Path) -> list[dict]:
    """The 2Wiki records of ``path`` (JSONL), in file order."""
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def load_corpus(path: Path) -> list[dict]:
    """The paragraphs ``{title, text}`` of ``path`` (a JSON array), in file order."""
    with path.open(encoding="utf-8") as handle:
        return json.load(handle)


def fold(text: str) -> str:
    """Text normalised as docs/method.md §2.1 does: NFKC, case-folded, whitespace collapsed, stripped."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def squad_normalise(text: str) -> str:
    """SQuAD answer normalisation: lower-case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


class Retriever:
    """BM25 over title + text of the corpus; returns the top-k paragraphs as one observation."""

    def __init__(self, corpus: list[dict], k: int = TOP_K) -> None:
        """Index ``corpus`` (``bm25s`` defaults, English stopwords, no stemming)."""
        self.corpus = corpus
        self.k = k
        self.tokenizer = Tokenizer(stopwords="en")
        texts = [f"{doc['title']} {doc['text']}" for doc in corpus]
        ids = self.tokenizer.tokenize(texts, update_vocab=True, return_as="ids", show_progress=False)
        self.bm25 = bm25s.BM25()
        self.bm25.index(ids, show_progress=False)
        self.cache: dict[str, str] = {}

    def observe(self, query: str) -> str:
        """The observation of ``query``: ``Doc i (Title: ...) text`` for the top-k hits."""
        if query not in self.cache:
            ids = self.tokenizer.tokenize(
                [query], update_vocab=False, return_as="ids", show_progress=False
            )
            hits, _ = self.bm25.retrieve(ids, k=self.k, show_progress=False)
            docs = [self.corpus[int(index)] for index in hits[0]]
            self.cache[query] = "\n".join(
                f"Doc {rank} (Title: {doc['title']}) {doc['text']}"
                for rank, doc in enumerate(docs, start=1)
            )
        return self.cache[query]


@dataclass
class RolloutBuilder:
    """One simulated rollout: its actions in file form plus what the summary needs to count."""

    rng: np.random.Generator
    retriever: Retriever
    record: dict
    skill: float
    distractor_pool: list[tuple[list[str], str]]
    items: list[dict] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    repeated_searches: int = 0
    raw_items: int = 0
    reworded: int = 0
    form_hop: dict[tuple[str, ...], int] = field(default_factory=dict)
    distractor_uid: dict[tuple[str, ...], str] = field(default_factory=dict)
    gold_in_store: set[int] = field(default_factory=set)
    store: list[list[str]] = field(default_factory=list)
    gold_forms: list[list[str]] = field(default_factory=list)
    distractors_used: list[tuple[list[str], str]] = field(default_factory=list)
    answer: str | None = None
    answered_from_empty_store: bool = False

    @property
    def gold(self) -> list[list[str]]:
        """The question's two gold evidence triples."""
        return self.record["evidences"]

    def pick(self, options: Sequence[T]) -> T:
        """One element of ``options``, drawn uniformly."""
        return options[int(self.rng.integers(len(options)))]

    def room(self, reserve: int) -> bool:
        """Whether one more action fits while keeping ``reserve`` slots free."""
        return len(self.items) < MAX_ACTIONS - reserve

    def as_raw(self) -> bool:
        """Whether the next valid action is written as raw model output (parsed by the library)."""
        return bool(self.rng.random() < 0.15)

    def add(self, item: dict, kind: str) -> None:
        """Append one action item of the given kind."""
        self.items.append(item)
        self.kinds.append(kind)
        self.raw_items += "raw" in item

    def maybe_invalid(self, reserve: int) -> None:
        """With a skill-dependent chance, emit an invalid action (garbled model output)."""
        if self.room(reserve + 1) and self.rng.random() < 0.025 + 0.075 * (1.0 - self.skill):
            self.add({"raw": self.garbled_text()}, "invalid")

    def garbled_text(self) -> str:
        """Model output that is no valid action: truncated JSON, bare prose, bad payloads."""
        subject, relation, bridge = self.gold[0]
        choice = int(self.rng.integers(5))
        if choice == 0:
            query = self.record["question"]
            head = '{"action": "search", "query": "'
            return head + query[: int(self.rng.integers(3, max(4, len(query) - 2)))]
        if choice == 1:
            topic = self.pick((f"the {relation} of {subject}", bridge, subject))
            return self.pick(PROSE_WITHOUT_ACTION).format(topic=topic)
        if choice == 2:
            return json.dumps({"action": "lookup", "entity": bridge}, ensure_ascii=False)
        if choice == 3:
            return json.dumps({"action": "assert", "facts": []})
        two_parts = [[bridge, self.gold[1][2]]]
        return json.dumps({"action": "assert", "facts": two_parts}, ensure_ascii=False)

    def search(self, query: str, reserve: int = 1) -> None:
        """A search with its real BM25 observation (maybe preceded by an invalid action)."""
        self.maybe_invalid(reserve)
        if not self.room(reserve):
            return
        observation = self.retriever.observe(query)
        if fold(query) in {fold(seen) for seen in self.queries}:
            self.repeated_searches += 1
        self.queries.append(query)
        if self.as_raw():
            payload = json.dumps({"action": "search", "query": query}, ensure_ascii=False)
            text = self.pick(
                (
                    f"{self.pick(SEARCH_PREAMBLES).format(query=query)}\n{payload}",
                    f"<search>{query}</search>",
                )
            )
            self.add({"raw": text, "observation": observation}, "search")
        else:
            self.add({"action": "search", "query": query, "observation": observation}, "search")

    def assert_facts(self, triples: list[list[str]], reserve: int = 1) -> None:
        """An assert of ``triples`` (maybe preceded by an invalid action)."""
        self.maybe_invalid(reserve)
        if not self.room(reserve):
            return
        for triple in triples:
            hop = self.form_hop.get(tuple(triple))
            if hop is not None:
                self.gold_in_store.add(hop)
                self.gold_forms.append(triple)
                self.reworded += fold(triple[1]) != fold(self.gold[hop][1])
            else:
                self.distractors_used.append((triple, self.distractor_uid[tuple(triple)]))
            self.store.append(triple)
        if self.as_raw():
            payload = json.dumps({"action": "assert", "facts": triples}, ensure_ascii=False)
            self.add({"raw": f"{self.pick(ASSERT_PREAMBLES)}\n{payload}"}, "assert")
        else:
            self.add({"action": "assert", "triples": triples}, "assert")

    def give_answer(self, text: str) -> None:
        """The final answer (maybe preceded by an invalid action, never crowded out)."""
        self.maybe_invalid(0)
        self.answer = text
        self.answered_from_empty_store = not self.store
        if self.as_raw():
            payload = json.dumps({"action": "answer", "answer": text}, ensure_ascii=False)
            text_form = self.pick(
                (f"{self.pick(ANSWER_PREAMBLES)}\n{payload}", f"<answer>{text}</answer>")
            )
            self.add({"raw": text_form}, "answer")
        else:
            self.add({"action": "answer", "answer": text}, "answer")

    def surface_form(self, hop: int) -> list[str]:
        """Gold triple ``hop`` as this rollout writes it: as is, in another case, or reworded."""
        subject, relation, obj = self.gold[hop]
        draw = self.rng.random()
        if draw < 0.6:
            form = [subject, relation, obj]
        elif draw < 0.8:
            form = self.pick(
                (
                    [subject.lower(), relation, obj],
                    [subject.lower(), relation.lower(), obj.lower()],
                    [subject, relation.capitalize(), obj],
                )
            )
        else:
            form = [subject, self.pick(RELATION_WORDINGS[relation]), obj]
        self.form_hop[tuple(form)] = hop
        return form

    def distractors(self, count: int) -> list[list[str]]:
        """``count`` distinct real evidence triples of other questions."""
        chosen = []
        for index in self.rng.choice(len(self.distractor_pool), size=count, replace=False):
            triple, source = self.distractor_pool[int(index)]
            self.distractor_uid[tuple(triple)] = source
            chosen.append(list(triple))
        return chosen

    def hop_facts(self, hop: int) -> list[list[str]]:
        """Triples asserted after the search of hop ``hop``: maybe gold, maybe distractors."""
        triples = []
        if self.rng.random() < 0.35 + 0.6 * self.skill:
            triples.append(self.surface_form(hop))
        count = min(3, int(self.rng.poisson(0.2 + 1.4 * (1.0 - self.skill))))
        if count or not triples:
            triples.extend(self.distractors(max(count, 1)))
        return [triples[int(index)] for index in self.rng.permutation(len(triples))]

    def first_query(self) -> str:
        """The opening query: the question, a lower-cased question, or subject + relation."""
        question = self.record["question"]
        subject, relation, _ = self.gold[0]
        return self.pick(
            (question, question, question, question.rstrip("?").lower(), f"{subject} {relation}")
        )

    def bridge_query(self) -> str:
        """The second-hop query: the bridge entity, alone or with the second relation."""
        bridge, relation, _ = self.gold[1]
        return self.pick((self.gold[0][2], f"{bridge} {relation}"))

    def right_answer(self) -> str:
        """The gold answer, sometimes in another case or with other punctuation."""
        answer = self.record["answer"]
        return self.pick(
            (answer, answer, answer, answer, answer.lower(), f"{answer}.", answer.replace(",", ""))
        )

    def wrong_answer(self) -> str:
        """A distractor entity: an object in the store, else an answer-like object elsewhere.

        Objects of the answer's relation (a place for "where was ... born") come first.
        """
        gold = squad_normalise(self.record["answer"])
        relation = self.gold[1][1]
        in_store = [t for t in self.store if squad_normalise(t[2]) != gold]
        if in_store and self.rng.random() < 0.7:
            alike = [t for t in in_store if fold(t[1]) == fold(relation)]
            return self.pick(alike or in_store)[2]
        same_kind = [t[2] for t, _ in self.distractor_pool if t[1] == relation]
        others = [t[2] for t, _ in self.distractor_pool]
        candidates = [obj for obj in (same_kind or others) if squad_normalise(obj) != gold]
        return self.pick(candidates)

    def decide_answer(self) -> str:
        """Right with a chance that rises with the gold triples in the store, else wrong."""
        chance = {frozenset(): 0.08, frozenset({0}): 0.15, frozenset({1}): 0.5}
        p_right = chance.get(frozenset(self.gold_in_store), 0.92)
        return self.right_answer() if self.rng.random() < p_right else self.wrong_answer()

    def repeat_search(self, reserve: int = 1) -> None:
        """Search an earlier query again, verbatim or in another letter case."""
        query = self.pick(self.queries)
        self.search(self.pick((query, query, query.lower())), reserve=reserve)

    def run_normal(self) -> None:
        """Search, assert, search the bridge, assert, answer (with skill-dependent slips)."""
        self.search(self.first_query())
        if self.rng.random() < 0.2:
            self.search(self.gold[0][0])
        self.assert_facts(self.hop_facts(0))
        if self.rng.random() < 0.25 * (1.0 - self.skill):
            self.assert_facts(self.hop_facts(1))
        else:
            self.search(self.bridge_query())
            if self.rng.random() < 0.05 + 0.25 * (1.0 - self.skill):
                self.repeat_search()
            self.assert_facts(self.hop_facts(1))
        self.give_answer(self.decide_answer())

    def run_never_answer(self) -> None:
        """Keep searching and asserting until the action budget runs out."""
        self.search(self.first_query(), reserve=0)
        while self.room(0):
            draw = self.rng.random()
            if draw < 0.35:
                self.search(self.pick((self.bridge_query(), self.first_query())), reserve=0)
            elif draw < 0.55:
                self.repeat_search(reserve=0)
            else:
                self.assert_facts(self.hop_facts(int(self.rng.integers(2))), reserve=0)

    def run_empty_store_answer(self) -> None:
        """Search once or twice, then answer without asserting anything."""
        self.search(self.first_query())
        if self.rng.random() < 0.5:
            self.search(self.bridge_query())
        text = self.right_answer() if self.rng.random() < 0.15 else self.wrong_answer()
        self.give_answer(text)


def distractor_pool(questions: list[dict], record: dict) -> list[tuple[list[str], str]]:
    """Evidence triples of the other questions (none equal to a gold one), with their uid."""
    gold = {tuple(fold(part) for part in triple) for triple in record["evidences"]}
    return [
        (triple, other["_id"])
        for other in questions
        if other["_id"] != record["_id"]
        for triple in other["evidences"]
        if tuple(fold(part) for part in triple) not in gold
    ]


def build(
    questions: list[dict], retriever: Retriever, rng: np.random.Generator
) -> tuple[list[dict], dict[str, dict], list[RolloutBuilder]]:
    """Simulate every group; return the rollout lines, the gold file and the builders."""
    total = len(questions) * GROUP_SIZE
    fates = (
        ["never_answer"] * NEVER_ANSWER
        + ["empty_store_answer"] * EMPTY_STORE_ANSWER
        + ["normal"] * (total - NEVER_ANSWER - EMPTY_STORE_ANSWER)
    )
    fates = [fates[int(index)] for index in rng.permutation(total)]
    lines, gold_file, builders = [], {}, []
    for q_index, record in enumerate(questions):
        uid = record["_id"]
        pool = distractor_pool(questions, record)
        group = []
        for i in range(GROUP_SIZE):
            skill = float(rng.beta(2.0, 2.0))
            builder = RolloutBuilder(rng, retriever, record, skill, pool)
            getattr(builder, f"run_{fates[q_index * GROUP_SIZE + i]}")()
            group.append(builder)
            lines.append(
                {
                    "uid": uid,
                    "question": record["question"],
                    "golden_answers": [record["answer"]],
                    "rollout_id": f"{uid}-{i}",
                    "actions": builder.items,
                }
            )
        asserted = [form for b in group for form in b.gold_forms]
        forms = dict.fromkeys(tuple(form) for form in record["evidences"] + asserted)
        sources = dict.fromkeys((tuple(t), s) for b in group for t, s in b.distractors_used)
        gold_file[uid] = {
            "question": record["question"],
            "answer": record["answer"],
            "evidences": record["evidences"],
            "gold": [list(form) for form in forms],
            "distractor_sources": [{"triple": list(t), "uid": s} for t, s in sources],
            "skills": {f"{uid}-{i}": round(b.skill, 3) for i, b in enumerate(group)},
        }
        builders.extend(group)
    return lines, gold_file, builders


def summary(builders: list[RolloutBuilder]) -> list[str]:
    """Proportions of the sample, one line each."""
    n = len(builders)
    kinds = [kind for b in builders for kind in b.kinds]
    answered = [b for b in builders if b.answer is not None]
    correct = sum(
        squad_normalise(b.answer) == squad_normalise(b.record["answer"]) for b in answered
    )
    empty = sum(b.answered_from_empty_store for b in answered)
    silent = n - len(answered)
    invalid = kinds.count("invalid")
    lengths = [len(b.items) for b in builders]
    repeats = sum(b.repeated_searches for b in builders)
    raw = sum(b.raw_items for b in builders)
    gold = sum(len(b.gold_forms) for b in builders)
    reworded = sum(b.reworded for b in builders)
    return [
        f"rollouts: {n} in {n // GROUP_SIZE} groups; actions: {len(kinds)}",
        f"actions per rollout: min {min(lengths)}, mean {np.mean(lengths):.2f}, max {max(lengths)}",
        f"correct answers (EM): {correct}/{n} = {correct / n:.1%}",
        f"never answer: {silent}/{n} = {silent / n:.1%}",
        f"answers from an empty store: {empty}/{n} = {empty / n:.1%}",
        f"invalid actions: {invalid}/{len(kinds)} = {invalid / len(kinds):.1%}",
        f"repeated searches: {repeats} of {kinds.count('search')} searches",
        f"items in raw form (parsed by the library): {raw}/{len(kinds)}",
        f"gold triples asserted: {gold}, {reworded} of them with a reworded relation",
    ]


def format_gold(gold_file: dict[str, dict]) -> str:
    """The gold file as JSON: one uid per block, one field per line, triples inline."""
    blocks = []
    for uid, entry in gold_file.items():
        fields = ",\n".join(
            f"    {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}"
            for key, value in entry.items()
        )
        blocks.append(f"  {json.dumps(uid)}: {{\n{fields}\n  }}")
    return "{\n" + ",\n".join(blocks) + "\n}\n"


def main() -> None:
    """Build the sample files and print their proportions; no options (``--help`` shows usage)."""
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    questions = load_questions(QUESTIONS_FILE)
    retriever = Retriever(load_corpus(CORPUS_FILE))
    rng = np.random.default_rng(SEED)
    lines, gold_file, builders = build(questions, retriever, rng)
    with ROLLOUTS_FILE.open("w", encoding="utf-8", newline="\n") as handle:
        for line in lines:
            handle.write(json.dumps(line, ensure_ascii=False) + "\n")
    GOLD_FILE.write_text(format_gold(gold_file), encoding="utf-8", newline="\n")
    print(f"wrote {ROLLOUTS_FILE.name} ({len(lines)} rollouts) and {GOLD_FILE.name}")
    for row in summary(builders):
        print(row)


if __name__ == "__main__":
    main()
