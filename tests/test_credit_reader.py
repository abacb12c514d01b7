"""The reader of the credit ablation (benchmarks/credit_reader.py): a Search-R1-style agent that
asserts nothing and answers from the passages its searches retrieved.

The paragraphs and facts named below were read from the data by hand: the question "Where was the
father of Ștefan I. Nenițescu born?" (2Wiki 019bed30, chain father -> place of birth, answer
Galați). BM25 top 3 of the question: paragraphs 4738 (Ștefan I. Nenițescu), 4739 (Ioan S.
Nenițescu), 1650 (Emanuel Glicen Romano); of "Ioan S. Nenițescu": 4739, 4738, 1284 (Jean
Negulesco). Paragraph 4738 offers (Ștefan I. Nenițescu, father, Ioan S. Nenițescu), then the
distractors (Hyman B. Samuels, place of birth, St Louis) and (Scotland, when did become part of
united kingdom, 1707); 4739 offers (Ioan S. Nenițescu, place of birth, Galați), then (Albert,
King of Sweden, place of birth, Mecklenburg) and (Barry Wesson, member of sports team, Houston
Astros).
"""

from __future__ import annotations

import math
import random
from functools import cache

import numpy as np

from benchmarks.credit_ablation import RUNS, Settings, initial_weights, play, success, train_run
from benchmarks.credit_env import (
    ANSWER,
    ASSERT,
    EMPTY_ANSWER,
    FEATURES,
    INVALID,
    MAX_ENTITY_QUERIES,
    OFFER_FEATURES,
    SEARCH,
    TOPK,
    Choice,
    Episode,
    World,
    action_features,
    choices,
    load_data,
    rollout_item,
    split_questions,
    step,
)
from benchmarks.credit_reader import ReaderEpisode
from factutil import FactUtilConfig, compute_process_advantages

QUESTION = "2wiki:019bed30"


@cache
def _world():
    questions, corpora, _ = load_data()
    return questions, World(questions, corpora)


def _setup():
    questions, world = _world()
    question = next(q for q in questions if q.uid.startswith(QUESTION))
    facts = [f for d in ("4738", "4739", "1650", "1284") for f in world.offers(question, d)]
    written = {f.key: world.wordings(f)[0] for f in facts}  # every fact offered as written
    return world, question, written


def _fact(world: World, question, subject: str):
    return next(f for d in ("4738", "4739", "1650", "1284") for f in world.offers(question, d)
                if f.subject == subject)


def test_the_readers_answer_by_hand():
    world, question, written = _setup()
    father, born = question.facts
    samuels = _fact(world, question, "Hyman B. Samuels")  # place of birth: St Louis
    albert = _fact(world, question, "Albert, King of Sweden")  # place of birth: Mecklenburg
    scotland = _fact(world, question, "Scotland")
    obs = {key: (w, 1) for key, w in written.items()}
    episode = ReaderEpisode(question, random.Random(0))
    assert episode.read_answer() == EMPTY_ANSWER  # nothing retrieved
    episode.observations = [[obs[father.key], obs[scotland.key]]]
    assert episode.read_answer() == "Ioan S. Nenițescu"  # no place of birth: the first fact read
    episode.observations = [[obs[born.key], obs[albert.key]]]
    assert episode.read_answer() == "Galați"  # the gold fact is read before its distractor
    episode.observations = [[obs[samuels.key], obs[born.key]]]
    assert episode.read_answer() == "St Louis"  # a same-relation distractor ranked above it
    episode.observations = [[obs[born.key]], [obs[samuels.key]]]
    assert episode.read_answer() == "St Louis"  # a later observation's distractor
    episode.observations = [[obs[born.key]], [obs[father.key], obs[scotland.key]]]
    assert episode.read_answer() == "Galați"  # a later observation without the asked relation
    # The inverse wording swaps subject and object; the answer is still the fact's object.
    inverse = next(w for w in world.wordings(born) if w.kind == "inverse")
    assert inverse.object == "Ioan S. Nenițescu"
    episode.observations = [[(inverse, 1)]]
    assert episode.read_answer() == "Galați"


def test_a_scripted_reader_rollout_and_what_factutil_reads_of_it():
    world, question, written = _setup()
    episode = ReaderEpisode(question, random.Random(0), wording_of=dict(written))
    kinds = {option.kind for option in choices(world, episode)}
    assert kinds == {SEARCH, ANSWER, INVALID}
    step(world, episode, Choice(SEARCH, query=question.question))
    # Paragraph 4738 then 4739, each fact as written: the rule's reading order gives St Louis.
    assert episode.read_answer() == "St Louis"
    options = choices(world, episode)
    assert not any(option.kind == ASSERT for option in options)  # the reader never asserts
    queries = [option.query for option in options if option.kind == SEARCH]
    assert queries == [question.question, "Ștefan I. Nenițescu", "Ioan S. Nenițescu",
                       "Hyman B. Samuels", "St Louis"]
    assert len(queries) == 1 + MAX_ENTITY_QUERIES
    x = action_features(episode, options)
    answer = x[[option.kind for option in options].index(ANSWER)]
    assert answer[FEATURES.index("answer_store_empty")] == 0.0
    assert answer[FEATURES.index("answer_store_size")] == 3 / 4  # 3 distinct paragraphs
    assert answer[FEATURES.index("answer_turn")] == 1 / 8
    # "born" in the question matches place of birth, offered by 4738's distractor.
    assert answer[FEATURES.index("answer_last_relation_in_question")] == 1.0
    # Entities of the latest observation: "Hyman B. Samuels" shares no word with the question;
    # of "Ioan S. Nenițescu" ("s" a stopword) one word in two is the question's.
    samuels, ioan = (x[queries.index(q)] for q in ("Hyman B. Samuels", "Ioan S. Nenițescu"))
    assert samuels[FEATURES.index("search_latest_entity")] == 1.0
    assert samuels[FEATURES.index("search_entity_in_question")] == 0.0
    assert ioan[FEATURES.index("search_latest_entity")] == 0.0
    assert ioan[FEATURES.index("search_entity_in_question")] == 0.5
    assert not x[:, [FEATURES.index(f) for f in FEATURES if f.startswith("assert_")]].any()
    # The facts that offered each entity: the question's words are {father, stefan, i, nenitescu,
    # born}, and so are the words searched so far (the question). Ioan S. Nenițescu is offered by
    # (Ștefan I. Nenițescu, father, Ioan S. Nenițescu), whose other entity is all the question's,
    # and by (Ioan S. Nenițescu, place of birth, Galați); Ștefan I. Nenițescu by the first only
    # (other entity: one word in two); Hyman B. Samuels and St Louis by the hard negative, place
    # of birth ("born" in the question), its other entity none of the question's words.
    relation, links = (len(FEATURES) + OFFER_FEATURES.index(f) for f in OFFER_FEATURES)
    assert x.shape == (len(options), len(FEATURES) + 2)
    assert [x[i, relation] for i in range(5)] == [0.0, 1.0, 1.0, 1.0, 1.0]
    assert [x[i, links] for i in range(5)] == [0.0, 0.5, 1.0, 0.0, 0.0]

    step(world, episode, Choice(SEARCH, query="Ioan S. Nenițescu"))  # 4739, 4738, 1284
    assert episode.read_answer() == "Galați"
    # Galați's fact links it to the query just searched ({ioan, nenitescu}: all its words).
    options = choices(world, episode)
    galati = next(i for i, o in enumerate(options) if o.kind == SEARCH and o.query == "Galați")
    assert action_features(episode, options)[galati, links] == 1.0
    step(world, episode, Choice(ANSWER))
    assert episode.answer == "Galați" and success(episode) == 1.0
    assert episode.evidence() == 4  # 4738, 4739, 1650, 1284
    assert [a["action"] for a in episode.actions] == [SEARCH, SEARCH, ANSWER]
    assert all(a["observation"].startswith("Doc 1") for a in episode.actions[:2])

    item = rollout_item(episode, "u", "u-0")
    retrieved = compute_process_advantages([item], FactUtilConfig(facts="retrieved"))
    # Each observation holds TOPK = 3 paragraphs; the second search brings one new (1284).
    assert TOPK == 3
    assert [len(a.new_clusters) for a in retrieved.actions] == [3, 1, 0]
    assert len(retrieved.clusters) == 4
    titles = {c.members[0][0] for c in retrieved.clusters}
    assert titles == {"Ștefan I. Nenițescu", "Ioan S. Nenițescu", "Emanuel Glicen Romano",
                      "Jean Negulesco"}
    assert retrieved.rollouts[0].outcome_reward == 1.0  # the answer's score (docs/method.md §9)
    # Under facts="asserted" an agent that asserts nothing answers from an empty store: R = 0.
    asserted = compute_process_advantages([item], FactUtilConfig())
    assert asserted.rollouts[0].empty_store_answer and asserted.rollouts[0].outcome_reward == 0.0


def test_only_the_readers_policy_sees_the_offer_features():
    world, question, written = _setup()
    asserter = Episode(question, random.Random(0), wording_of=dict(written))
    step(world, asserter, Choice(SEARCH, query=question.question))
    assert action_features(asserter, choices(world, asserter)).shape[1] == len(FEATURES)
    assert ReaderEpisode.features == FEATURES + OFFER_FEATURES
    prompted = initial_weights("prompted", "reader")
    assert prompted[:len(FEATURES)].tolist() == initial_weights("prompted").tolist()
    assert prompted[len(FEATURES):].tolist() == [1.0, 2.0]  # relation in question, links
    assert not initial_weights("cold", "reader")[len(FEATURES):].any()


def test_the_reader_outcome_only_arm_scores_the_answer():
    runs = {run.name: run for run in RUNS}
    assert runs["outcome_only"].agent_config("reader").facts == "retrieved"
    assert runs["outcome_only"].agent_config("asserter").facts == "asserted"
    assert runs["default"].agent_config("reader").facts == "asserted"
    assert runs["retrieved"].agent_config("reader") == runs["retrieved"].config()


def test_a_reader_block_trains_two_iterations():
    questions, world = _world()
    train, heldout = split_questions(questions)
    settings = Settings(iterations=2, batch=3, eval_every=2, eval_samples=1, start="cold",
                        agent="reader")
    assert settings.block == "reader-cold/plain"
    episode, decisions = play(world, train[0], np.zeros(len(ReaderEpisode.features)),
                              np.random.default_rng(0), random.Random(0), "reader")
    assert isinstance(episode, ReaderEpisode) and not episode.store
    assert len(decisions) == len(episode.actions)
    for name in ("outcome_only", "default", "retrieved"):
        run = next(r for r in RUNS if r.name == name)
        result = train_run(world, train[:10], heldout[:4], run, 0, settings)
        assert result["block"] == "reader-cold/plain"
        assert [r["iteration"] for r in result["records"]] == [0, 1, 2]
        for record in result["records"]:
            numbers = [v for k, v in record.get("heldout", {}).items()]
            numbers += [record[k] for k in ("train_em", "surrogate", "max_process_term")
                        if k in record]
            assert all(math.isfinite(v) for v in numbers)
        assert all(math.isfinite(v) for v in result["weights"])
