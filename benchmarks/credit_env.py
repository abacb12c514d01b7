"""The environment of the credit ablation: real questions, real paragraphs, real facts.

A question has a gold *fact chain* (2–3 triples; the last object is the answer). The agent acts
as docs/method.md §1 says — ``search``, ``assert``, ``answer`` or an unparsable (invalid) output, at most 8
actions — and sees only the question, its fact store and the latest observation:

* **search** — the queries on offer are the question itself and each entity (subject or object,
  as written) of the facts in the store. BM25 (``factutil.tools.retrieval.BM25Retriever``: ``bm25s``,
  English stopwords) over the question's corpus returns the top 3 real paragraphs.
* **assert** — one triple from the current observation. A returned paragraph offers the gold facts
  of this question that it supports (2Wiki ``supporting_facts`` titles, MuSiQue
  ``paragraph_support_idx``) and up to ``DISTRACTORS_PER_PARAGRAPH`` facts of *other* questions:
  first those the paragraph really supports (it is their supporting paragraph), then seeded draws
  from the pool, one of them a *hard negative* sharing a relation with this question's chain when
  one exists. Each fact is offered in the rollout's wording of it: as written (half the time) or
  one paraphrase from ``benchmarks.cluster_quality``'s generators (relation verbalisation, inverse
  with subject and object swapped, date/number/unit format, name without accents or punctuation,
  letter case), drawn once per rollout and fact; sometimes a second wording of the same fact is
  offered beside it (an agent restating what it has). Re-asserting is allowed (it earns nothing).
* **answer** — reads only the store: the object of the most recently asserted fact whose relation
  is the relation the question asks for last (the chain's last relation), else the object of the
  most recently asserted fact, else "unknown" (an empty store). So it is right exactly when the
  chain's last fact is in the store and no same-relation distractor was asserted after it.
* **invalid** — a truncated JSON action; ``factutil.parse`` reads it as a format error.

A second agent, the **reader** (:class:`benchmarks.credit_reader.ReaderEpisode`, whose module
says how it searches and answers), acts as Search-R1 does: ``search``, ``answer``, ``invalid``,
no assert; it answers from the passages its searches retrieved.

The policy sees each available action through :func:`action_features` (text only: token overlap
with the question and the store, the paragraph's rank, a repeated query …), never the gold labels.

Data (``benchmarks/data``): the 30 2Wiki dev compositional questions with ``evidences`` plus the
compositional record of ``kag_2wiki_qa_sub2_full.json``; a 2Wiki question is used only when every
evidence's supporting paragraph is in the corpus (the bundled
``hipporag_2wikimultihopqa_corpus.json`` plus the KAG record's own paragraphs) — 6 are (5 of the
30, and the KAG record). The 100 MuSiQue questions, their 1,890 distinct paragraphs as the corpus;
the chain is read from ``question_decomposition`` by :func:`musique_fact`; 2- and 3-step chains
are used (4 steps need 9 actions).
"""

from __future__ import annotations

import json
import random
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path

import numpy as np

from benchmarks.cluster_quality import RELATIONS, Relation, SourceFact, _paraphrases
from benchmarks.cluster_quality import fold_key as _fold_key
from factutil.search_r1 import feedback, information
from factutil.tools.retrieval import (
    BM25Retriever,
    Document,
    Passage,
    format_observation,
    load_corpus,
)

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "benchmarks" / "data"
CORPUS_2WIKI = ROOT / "examples" / "data" / "hipporag_2wikimultihopqa_corpus.json"

MAX_ACTIONS = 8
TOPK = 3
MAX_HOPS = 3
DISTRACTORS_PER_PARAGRAPH = 2
MAX_ENTITY_QUERIES = 4
P_AS_WRITTEN = 0.5  # a fact is offered as written, else in one paraphrase (per rollout and fact)
P_SECOND_WORDING = 0.25  # chance an offer also carries a second wording of the same fact
EMPTY_ANSWER = "unknown"
INVALID_TEXT = '{"action": "search", "query": "'  # truncated JSON: an invalid action
_FALLBACK_RELATION = Relation("entity")  # relations the generators do not know: name/case only

_STOP = frozenset((
    "a", "an", "the", "of", "in", "on", "at", "to", "for", "from", "by", "with", "and", "or", "is",
    "was", "are", "were", "be", "been", "who", "whom", "whose", "what", "which", "when", "where",
    "why", "how", "did", "does", "do", "has", "have", "had", "that", "this", "it", "its", "as", "s",
))


@cache
def fold_key(text: str) -> str:
    """``benchmarks.cluster_quality.fold_key`` (lower-case ASCII letters and digits), memoised."""
    return _fold_key(text)


@cache
def tokens(text: str) -> frozenset[str]:
    """Content words of ``text``: folded (accents, punctuation, case), stopwords dropped."""
    return frozenset(word for word in fold_key(text).split() if word not in _STOP)


def containment(part: frozenset[str], whole: frozenset[str]) -> float:
    """Share of ``part``'s words found in ``whole`` (0 when ``part`` is empty)."""
    return len(part & whole) / len(part) if part else 0.0


def _relation_phrases() -> dict[str, tuple[frozenset[str], ...]]:
    """Folded relation wording -> the word sets of every wording of its relation (label, other
    verbalisations, inverse forms), from the relation table of ``benchmarks.cluster_quality``."""
    out: dict[str, set[frozenset[str]]] = {}
    for label, relation in RELATIONS.items():
        phrases = (label, *relation.said, *relation.inverse)
        words = {tokens(phrase) for phrase in phrases} - {frozenset()}
        for phrase in phrases:
            out.setdefault(fold_key(phrase), set()).update(words)
    return {key: tuple(sorted(value, key=sorted)) for key, value in out.items()}


_RELATION_PHRASES = _relation_phrases()


@cache
def relation_match(relation: str, words: frozenset[str]) -> float:
    """How well a relation wording matches ``words`` (the question's): the best share of one of
    its relation's wordings found there ("born in" matches "Where was X born?" for place of
    birth, whichever wording of place of birth is asserted)."""
    own = tokens(relation)
    options = (own, *_RELATION_PHRASES.get(fold_key(relation), ()))
    return max(containment(option, words) for option in options)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a ∩ b| / |a ∪ b| (0 when both are empty)."""
    union = a | b
    return len(a & b) / len(union) if union else 0.0


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fact:
    """One real fact: gold for question ``uid`` at position ``hop`` of its chain."""

    key: str  # "<uid>/f<hop>"
    subject: str
    relation: str
    object: str
    uid: str
    hop: int
    support: str  # id of the supporting paragraph in the question's corpus
    source: str  # file and record


@dataclass(frozen=True)
class Question:
    """A question with its gold chain; ``answers`` are the gold answers (MuSiQue: with aliases)."""

    uid: str
    dataset: str  # "2wiki" | "musique"
    question: str
    answers: tuple[str, ...]
    facts: tuple[Fact, ...]
    corpus: str  # key of the corpus its searches use

    @cached_property
    def words(self) -> frozenset[str]:
        return tokens(self.question)


@dataclass(frozen=True)
class Wording:
    """A way of writing a fact (``kind`` "written" or a paraphrase kind of cluster_quality)."""

    fact: Fact
    subject: str
    relation: str
    object: str
    kind: str

    @property
    def triple(self) -> list[str]:
        return [self.subject, self.relation, self.object]


_REF = re.compile(r"#(\d)")
_REF_WITH_POSSESSIVE = re.compile(r"#\d\s*(?:'s|’s)?")
_PARENTHESIS = re.compile(r"\s*\([^)]*\)\s*$")


def _clean(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip(" ?")


def musique_fact(step: dict, answers: Sequence[str], support_title: str) -> tuple[str, str, str]:
    """A MuSiQue decomposition step as a triple ``(subject, relation, object)``.

    The object is the step's answer. ``"S >> relation"``: the subject is S with each ``#k``
    replaced by the answer of step k. A question in words: the subject is the entity it refers
    to (the answer of the first ``#k``; other ``#k`` are replaced by their answers) and the
    relation is the question without that reference (and its possessive), lower-cased, without
    the question mark — ``"Who was the first president of #1 ?"`` -> ``(Djibouti, "who was the
    first president of", Hassan Gouled Aptidon)``; with no reference, the subject is the title
    of the supporting paragraph (less a trailing parenthesis) and the relation the question less
    that title where it occurs.
    """
    question = step["question"]

    def resolve(text: str) -> str:
        return _clean(_REF.sub(lambda m: answers[int(m.group(1)) - 1], text))

    if ">>" in question:
        subject, relation = question.split(">>", 1)
        return resolve(subject), _clean(relation), step["answer"]
    refs = _REF.findall(question)
    if refs:
        subject = answers[int(refs[0]) - 1]
        first = _REF_WITH_POSSESSIVE.search(question)
        rest = question[: first.start()] + " " + question[first.end():]
        relation = resolve(rest)
    else:
        subject = _PARENTHESIS.sub("", support_title)
        relation = _clean(re.sub(re.escape(subject), " ", question, flags=re.IGNORECASE))
    relation = relation[:1].lower() + relation[1:]
    return subject, relation or "is", step["answer"]


def _chain_ok(facts: Sequence[Fact]) -> bool:
    return 2 <= len(facts) <= MAX_HOPS and all(f.subject and f.relation and f.object for f in facts)


def load_2wiki(data_dir: Path = DATA_DIR, corpus_path: Path = CORPUS_2WIKI
               ) -> tuple[list[Question], list[Document], dict[str, int]]:
    """The usable 2Wiki questions, the corpus, and how many were left out and why."""
    documents = load_corpus(corpus_path)
    by_title = {doc.title: doc.id for doc in documents}
    name = "2wiki_dev_compositional30_evidences.jsonl"
    records = [(name, json.loads(line))
               for line in (data_dir / name).read_text("utf-8").splitlines() if line.strip()]
    kag = "kag_2wiki_qa_sub2_full.json"
    for record in json.loads((data_dir / kag).read_text("utf-8")):
        if record["type"] != "compositional":
            continue
        records.append((kag, record))
        for title, sentences in record["context"]:
            if title not in by_title:  # the record's own real paragraphs join the corpus
                doc = Document(f"kag:{len(documents)}", title, " ".join(sentences))
                documents.append(doc)
                by_title[title] = doc.id
    questions, dropped = [], {"no supporting paragraph in the corpus": 0}
    for file, record in records:
        uid = f"2wiki:{record['_id'][:8]}"
        titles = [title for title, _ in record["supporting_facts"]]
        if len(titles) != len(record["evidences"]) or not all(t in by_title for t in titles):
            dropped["no supporting paragraph in the corpus"] += 1
            continue
        facts = tuple(
            Fact(f"{uid}/f{k}", s, r, o, uid, k, by_title[titles[k]],
                 f"{file}#{record['_id']}/evidences/{k}")
            for k, (s, r, o) in enumerate(record["evidences"])
        )
        if _chain_ok(facts):
            questions.append(Question(uid, "2wiki", record["question"], (record["answer"],),
                                      facts, "2wiki"))
    return questions, documents, dropped


def load_musique(data_dir: Path = DATA_DIR) -> tuple[list[Question], list[Document], dict[str, int]]:
    """The MuSiQue questions with 2–3 step chains, the corpus of all their paragraphs, drops."""
    name = "hipporag_musique_train100.json"
    records = json.loads((data_dir / name).read_text("utf-8"))
    documents: list[Document] = []
    doc_of: dict[tuple[str, str], str] = {}
    for record in records:
        for paragraph in record["paragraphs"]:
            key = (paragraph["title"], paragraph["paragraph_text"])
            if key not in doc_of:
                doc_of[key] = f"m{len(documents)}"
                documents.append(Document(doc_of[key], *key))
    questions, dropped = [], {f"more than {MAX_HOPS} steps": 0}
    for record in records:
        steps = record["question_decomposition"]
        if len(steps) > MAX_HOPS:
            dropped[f"more than {MAX_HOPS} steps"] += 1
            continue
        uid = f"musique:{record['id']}"
        answers = [step["answer"] for step in steps]
        facts = []
        for k, step in enumerate(steps):
            paragraph = record["paragraphs"][step["paragraph_support_idx"]]
            s, r, o = musique_fact(step, answers, paragraph["title"])
            facts.append(Fact(f"{uid}/f{k}", s, r, o, uid, k,
                              doc_of[(paragraph["title"], paragraph["paragraph_text"])],
                              f"{name}#{record['id']}/question_decomposition/{k}"))
        if _chain_ok(facts):
            golds = (record["answer"], *record.get("answer_aliases", []))
            questions.append(Question(uid, "musique", record["question"], golds, tuple(facts),
                                      "musique"))
    return questions, documents, dropped


def load_data(data_dir: Path = DATA_DIR, corpus_path: Path = CORPUS_2WIKI
              ) -> tuple[list[Question], dict[str, list[Document]], dict[str, int]]:
    """Every usable question (2Wiki first, then MuSiQue, file order), the corpora, the drops."""
    wiki, wiki_docs, wiki_dropped = load_2wiki(data_dir, corpus_path)
    musique, musique_docs, musique_dropped = load_musique(data_dir)
    dropped = {f"2wiki: {k}": v for k, v in wiki_dropped.items()}
    dropped.update({f"musique: {k}": v for k, v in musique_dropped.items()})
    return wiki + musique, {"2wiki": wiki_docs, "musique": musique_docs}, dropped


def split_questions(questions: Sequence[Question], heldout_every: int = 3
                    ) -> tuple[list[Question], list[Question]]:
    """(train, held-out): every ``heldout_every``-th question of each dataset is held out."""
    train, heldout = [], []
    for dataset in ("2wiki", "musique"):
        subset = [q for q in questions if q.dataset == dataset]
        for index, question in enumerate(subset):
            (heldout if index % heldout_every == heldout_every - 1 else train).append(question)
    return train, heldout


# ---------------------------------------------------------------------------------------------
# The world: retrieval, offers, wordings (deterministic, cached)
# ---------------------------------------------------------------------------------------------


def _seed(*parts: object) -> int:
    return zlib.crc32("|".join(map(str, parts)).encode("utf-8"))


class World:
    """Retrieval and fact offers over the corpora; every answer is deterministic and cached."""

    def __init__(self, questions: Sequence[Question], corpora: dict[str, list[Document]]):
        self.questions = list(questions)
        self.corpora = corpora
        self.documents = {name: {d.id: d for d in docs} for name, docs in corpora.items()}
        self._retrievers: dict[str, BM25Retriever] = {}
        self._search_cache: dict[tuple[str, str], tuple[str, ...]] = {}
        self._observation_cache: dict[tuple[str, tuple[str, ...]], str] = {}
        self._offer_cache: dict[tuple[str, str], tuple[Fact, ...]] = {}
        self._variant_cache: dict[str, tuple[Wording, ...]] = {}
        self.pool = [fact for q in self.questions for fact in q.facts]
        self._by_uid = {q.uid: q for q in self.questions}
        self.supported_by: dict[tuple[str, str], list[Fact]] = {}
        for fact in self.pool:
            corpus = self._by_uid[fact.uid].corpus
            self.supported_by.setdefault((corpus, fact.support), []).append(fact)
        self._by_relation: dict[str, list[Fact]] = {}
        for fact in self.pool:
            self._by_relation.setdefault(fact.relation, []).append(fact)

    def search(self, corpus: str, query: str) -> tuple[str, ...]:
        """Ids of the top ``TOPK`` paragraphs of ``query`` (BM25), best first."""
        key = (corpus, query)
        if key not in self._search_cache:
            if corpus not in self._retrievers:
                self._retrievers[corpus] = BM25Retriever(self.corpora[corpus])
            hits = self._retrievers[corpus].search([query], TOPK)[0]
            self._search_cache[key] = tuple(doc.id for doc, _ in hits)
        return self._search_cache[key]

    def observation(self, corpus: str, doc_ids: Sequence[str]) -> str:
        """The observation text of a search (``Doc i (Title: ...) text`` lines)."""
        key = (corpus, tuple(doc_ids))
        if key not in self._observation_cache:
            docs = [self.documents[corpus][i] for i in doc_ids]
            self._observation_cache[key] = format_observation(Passage(d.title, d.text) for d in docs)
        return self._observation_cache[key]

    def offers(self, question: Question, doc_id: str) -> tuple[Fact, ...]:
        """The facts paragraph ``doc_id`` offers to ``question``: its gold facts, then distractors."""
        key = (question.uid, doc_id)
        if key in self._offer_cache:
            return self._offer_cache[key]
        supported = self.supported_by.get((question.corpus, doc_id), [])
        gold = [f for f in supported if f.uid == question.uid]
        others = [f for f in supported if f.uid != question.uid][:DISTRACTORS_PER_PARAGRAPH]
        rng = random.Random(_seed("offers", question.uid, doc_id))
        taken = {f.key for f in others}
        relations = sorted({f.relation for f in question.facts})
        hard = [f for r in relations for f in self._by_relation.get(r, [])
                if f.uid != question.uid and f.key not in taken]
        if hard and len(others) < DISTRACTORS_PER_PARAGRAPH:
            pick = rng.choice(hard)
            others.append(pick)
            taken.add(pick.key)
        while len(others) < DISTRACTORS_PER_PARAGRAPH:
            pick = rng.choice(self.pool)
            if pick.uid != question.uid and pick.key not in taken:
                others.append(pick)
                taken.add(pick.key)
        self._offer_cache[key] = tuple(gold + others)
        return self._offer_cache[key]

    def wordings(self, fact: Fact) -> tuple[Wording, ...]:
        """The fact as written, then one wording per paraphrase kind that applies (seeded)."""
        if fact.key not in self._variant_cache:
            relation = RELATIONS.get(fact.relation, _FALLBACK_RELATION)
            source = SourceFact(fact.subject, fact.relation, fact.object, fact.source)
            variants = _paraphrases(source, relation, random.Random(_seed("wordings", fact.key)))
            out = [Wording(fact, fact.subject, fact.relation, fact.object, "written")]
            seen = {fold_key(" | ".join(out[0].triple))}
            for kind in sorted(variants):
                s, r, o = variants[kind]
                folded = fold_key(f"{s} | {r} | {o}")
                if kind != "case" and folded in seen:
                    continue
                seen.add(folded)
                out.append(Wording(fact, s, r, o, kind))
            self._variant_cache[fact.key] = tuple(out)
        return self._variant_cache[fact.key]


# ---------------------------------------------------------------------------------------------
# One rollout
# ---------------------------------------------------------------------------------------------

SEARCH, ASSERT, ANSWER, INVALID = "search", "assert", "answer", "invalid"

FEATURES = (
    "is_search", "is_assert", "is_answer", "is_invalid",
    "search_question", "search_latest_entity", "search_entity_in_question", "search_repeated",
    "assert_links_question", "assert_links_store", "assert_entities_stored",
    "assert_relation_in_question", "assert_paragraph_rank",
    "answer_store_empty", "answer_store_size", "answer_turn", "answer_last_relation_in_question",
)
N_FEATURES = len(FEATURES)
# The reader's policy sees FEATURES and, of each entity query, the facts that offered it:
# the best relation_match of their relation with the question, and the best share of their other
# entity's words found in the question or an earlier query (the entity a fact links to what was
# asked). The asserting agent's policy does not (its asserts see relation and links already).
OFFER_FEATURES = ("search_offer_relation_in_question", "search_offer_links_searched")
_F = {name: index for index, name in enumerate(FEATURES + OFFER_FEATURES)}


@dataclass
class Choice:
    """One available action: its kind and payload (a query, or a wording with its paragraph rank)."""

    kind: str
    query: str = ""
    wording: Wording | None = None
    rank: int = 0


@dataclass
class Episode:
    """The state and record of one rollout of ``question``."""

    question: Question
    rng: random.Random  # wordings and second offers of this rollout
    store: list[Wording] = field(default_factory=list)
    searched: list[str] = field(default_factory=list)
    offered: list[tuple[Wording, int]] = field(default_factory=list)  # latest observation
    actions: list[dict] = field(default_factory=list)  # docs/method.md §8 action items
    answer: str | None = None
    wording_of: dict[str, Wording] = field(default_factory=dict)  # fact key -> drawn wording
    observations: list[list[tuple[Wording, int]]] = field(default_factory=list)  # every search's offers
    retrieved: list[str] = field(default_factory=list)  # paragraph ids of every search, in order

    features = FEATURES  # what the policy sees of an action (the columns of action_features)

    @property
    def done(self) -> bool:
        return self.answer is not None or len(self.actions) >= MAX_ACTIONS

    def store_entities(self) -> list[frozenset[str]]:
        return [tokens(part) for w in self.store for part in (w.subject, w.object)]

    # What the agent's answer reads and what its policy sees of it. The asserting agent reads its
    # store; ``benchmarks.credit_reader.ReaderEpisode`` (an agent that asserts nothing) overrides
    # these to read the passages its searches retrieved.

    def evidence(self) -> int:
        """How much the answer has to read: the number of facts in the store."""
        return len(self.store)

    def latest_entities(self) -> set[str]:
        """Folded subject and object of the latest fact stored (the entities just found)."""
        if not self.store:
            return set()
        return {fold_key(self.store[-1].subject), fold_key(self.store[-1].object)}

    def answer_relation(self) -> float:
        """relation_match of the latest stored fact's relation with the question (0: none)."""
        return relation_match(self.store[-1].relation, self.question.words) if self.store else 0.0

    def entity_sources(self) -> list[Wording]:
        """The wordings whose entities may be searched, latest first: the store's."""
        return self.store[::-1]

    def entity_offers(self) -> dict[str, list[tuple[str, str]]]:
        """Folded entity -> (relation, other entity) of each fact that offered it as a query, for
        :data:`OFFER_FEATURES`; none for the asserting agent, whose policy does not see them."""
        return {}

    def assertable(self) -> list[tuple[Wording, int]]:
        """The wordings an assert may take, with their paragraph rank: the latest observation's."""
        return self.offered

    def read_answer(self) -> str:
        """The answer the agent gives now (:func:`answer_from_store`)."""
        return answer_from_store(self)

    def gold_recall(self) -> float:
        """Share of the question's gold facts present in the store (any wording)."""
        stored = {w.fact.key for w in self.store}
        return sum(f.key in stored for f in self.question.facts) / len(self.question.facts)

    def wording_for(self, world: World, fact: Fact) -> Wording:
        """This rollout's wording of ``fact``, drawn when the fact is first offered."""
        if fact.key not in self.wording_of:
            options = world.wordings(fact)
            if len(options) == 1 or self.rng.random() < P_AS_WRITTEN:
                self.wording_of[fact.key] = options[0]
            else:
                self.wording_of[fact.key] = self.rng.choice(options[1:])
        return self.wording_of[fact.key]


def choices(world: World, episode: Episode) -> list[Choice]:
    """The actions available now, in a fixed order: searches (the question, then the entities of
    ``episode.entity_sources()``), asserts (``episode.assertable()``), answer, invalid."""
    out = [Choice(SEARCH, query=episode.question.question)]
    seen = {fold_key(episode.question.question)}
    for wording in episode.entity_sources():
        for entity in (wording.subject, wording.object):
            key = fold_key(entity)
            if key and key not in seen and len(out) <= MAX_ENTITY_QUERIES:
                seen.add(key)
                out.append(Choice(SEARCH, query=entity.strip()))
    out += [Choice(ASSERT, wording=w, rank=rank) for w, rank in episode.assertable()]
    out += [Choice(ANSWER), Choice(INVALID)]
    return out


def action_features(episode: Episode, options: Sequence[Choice]) -> np.ndarray:
    """float64 (n, len(episode.features)): what the policy sees of each available action (text
    only)."""
    question = episode.question
    qwords = question.words
    stored = episode.store_entities()
    latest = episode.latest_entities()
    searched = {fold_key(q) for q in episode.searched}
    offers = episode.entity_offers()  # empty for the asserting agent: nothing more to read
    known = qwords.union(*(tokens(q) for q in episode.searched)) if offers else qwords

    def link(entity: frozenset[str]) -> float:
        return max((jaccard(entity, other) for other in stored), default=0.0)

    x = np.zeros((len(options), len(episode.features)))
    for i, option in enumerate(options):
        if option.kind == SEARCH:
            x[i, _F["is_search"]] = 1.0
            key = fold_key(option.query)
            if option.query == question.question:
                x[i, _F["search_question"]] = 1.0
            else:
                words = tokens(option.query)
                inside = containment(words, qwords)
                x[i, _F["search_entity_in_question"]] = inside
                x[i, _F["search_latest_entity"]] = float(key in latest and inside < 0.5)
                facts = offers.get(key)
                if facts:
                    x[i, _F["search_offer_relation_in_question"]] = max(
                        relation_match(relation, qwords) for relation, _ in facts)
                    x[i, _F["search_offer_links_searched"]] = max(
                        containment(tokens(other), known) for _, other in facts)
            x[i, _F["search_repeated"]] = float(key in searched)
        elif option.kind == ASSERT:
            w = option.wording
            subject, obj = tokens(w.subject), tokens(w.object)
            x[i, _F["is_assert"]] = 1.0
            x[i, _F["assert_links_question"]] = max(containment(subject, qwords),
                                                    containment(obj, qwords))
            links = (link(subject), link(obj))
            x[i, _F["assert_links_store"]] = max(links)
            x[i, _F["assert_entities_stored"]] = float(min(links) >= 0.999)
            x[i, _F["assert_relation_in_question"]] = relation_match(w.relation, qwords)
            x[i, _F["assert_paragraph_rank"]] = 1.0 / option.rank
        elif option.kind == ANSWER:
            x[i, _F["is_answer"]] = 1.0
            evidence = episode.evidence()
            x[i, _F["answer_store_empty"]] = float(not evidence)
            x[i, _F["answer_store_size"]] = min(evidence, 4) / 4
            x[i, _F["answer_turn"]] = len(episode.actions) / MAX_ACTIONS
            x[i, _F["answer_last_relation_in_question"]] = episode.answer_relation()
        else:
            x[i, _F["is_invalid"]] = 1.0
    return x


def label(episode: Episode, option: Choice) -> str:
    """What ``option`` is, by the hidden gold labels (for reports only; the policy never sees it):
    ``search``, ``search (repeated)``, ``assert gold``, ``assert distractor``, ``assert restated``
    (a fact already in the store, in any wording), ``answer``, ``invalid``."""
    if option.kind == SEARCH:
        return "search (repeated)" if option.query in episode.searched else "search"
    if option.kind == ASSERT:
        fact = option.wording.fact
        if any(w.fact.key == fact.key for w in episode.store):
            return "assert restated"
        return "assert gold" if fact.uid == episode.question.uid else "assert distractor"
    return option.kind


LABELS = ("search", "search (repeated)", "assert gold", "assert distractor", "assert restated",
          "answer", "invalid")


def answer_from_store(episode: Episode) -> str:
    """The answer the store supports (see the module docstring)."""
    if not episode.store:
        return EMPTY_ANSWER
    asked = episode.question.facts[-1].relation
    for wording in reversed(episode.store):
        if wording.fact.relation == asked:
            return wording.fact.object
    return episode.store[-1].fact.object


def step(world: World, episode: Episode, option: Choice) -> None:
    """Apply ``option`` to ``episode`` and record it as a docs/method.md §8 action item."""
    question = episode.question
    if option.kind == SEARCH:
        doc_ids = world.search(question.corpus, option.query)
        episode.searched.append(option.query)
        offered: list[tuple[Wording, int]] = []
        for rank, doc_id in enumerate(doc_ids, start=1):
            for fact in world.offers(question, doc_id):
                wording = episode.wording_for(world, fact)
                offered.append((wording, rank))
                alternatives = [w for w in world.wordings(fact) if w is not wording]
                if alternatives and episode.rng.random() < P_SECOND_WORDING:
                    offered.append((episode.rng.choice(alternatives), rank))
        unique: dict[tuple[str, str, str], tuple[Wording, int]] = {}
        for wording, rank in offered:
            unique.setdefault(tuple(wording.triple), (wording, rank))
        episode.offered = list(unique.values())
        episode.observations.append(episode.offered)
        episode.retrieved.extend(doc_ids)
        episode.actions.append({"action": SEARCH, "query": option.query,
                                "observation": world.observation(question.corpus, doc_ids)})
    elif option.kind == ASSERT:
        episode.store.append(option.wording)
        episode.actions.append({"action": ASSERT, "triples": [option.wording.triple]})
    elif option.kind == ANSWER:
        episode.answer = episode.read_answer()
        episode.actions.append({"action": ANSWER, "answer": episode.answer})
    else:
        episode.actions.append({"raw": INVALID_TEXT + question.question[:40]})


def gold_passage_recall(episode: Episode) -> float:
    """Share of the question's supporting paragraphs that the rollout's searches retrieved."""
    gold = {fact.support for fact in episode.question.facts}
    return len(gold & set(episode.retrieved)) / len(gold)


def search_r1_response(world: World, episode: Episode) -> str:
    """The rollout as one Search-R1 response text: ``<search>q</search>`` and its paragraphs as
    Search-R1's retriever writes them (``<information>Doc 1(Title: "T") text ...</information>``),
    ``<assert>[[s, r, o]]</assert>``, ``<answer>a</answer>``; an invalid turn followed by
    Search-R1's notice. :func:`factutil.search_r1.split_turns` reads it back into the actions."""
    corpus = episode.question.corpus
    parts = []
    for k, action in enumerate(episode.actions):
        if "raw" in action:
            parts.append(action["raw"] + ("" if k == len(episode.actions) - 1 else feedback("invalid")))
        elif action["action"] == SEARCH:
            docs = [world.documents[corpus][i] for i in world.search(corpus, action["query"])]
            listing = "".join(f'Doc {rank}(Title: "{d.title}") {d.text}\n'
                              for rank, d in enumerate(docs, start=1))
            parts.append(f"<search>{action['query']}</search>{information(listing)}")
        elif action["action"] == ASSERT:
            parts.append(f"<assert>{json.dumps(action['triples'], ensure_ascii=False)}</assert>")
        else:
            parts.append(f"<answer>{action['answer']}</answer>")
    return "".join(parts)


def rollout_item(episode: Episode, uid: str, rollout_id: str, world: World | None = None) -> dict:
    """The rollout as a docs/method.md §8 input line for ``compute_process_advantages``: its
    actions, or with ``world`` its whole :func:`search_r1_response` as ``response``.

    ``uid`` names the group (one per question *in a batch*, as a trainer's prompt uid: a question
    drawn twice in one batch makes two groups)."""
    question = episode.question
    item = {"uid": uid, "question": question.question,
            "golden_answers": list(question.answers), "rollout_id": rollout_id}
    if world is not None:
        return {**item, "response": search_r1_response(world, episode)}
    return {**item, "actions": episode.actions}
