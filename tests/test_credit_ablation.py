"""The credit-ablation miniature: its data, environment rules, trainer and command.

Timings are recorded by the benchmark, never asserted here.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from benchmarks.credit_ablation import (
    RUNS,
    Batch,
    Decision,
    Settings,
    add_paired,
    cut_at,
    fate_table,
    group_outcome,
    grpo_outcome_advantages,
    initial_weights,
    paired_difference,
    play,
    train_run,
)
from benchmarks.credit_env import (
    ANSWER,
    ASSERT,
    EMPTY_ANSWER,
    FEATURES,
    MAX_ACTIONS,
    N_FEATURES,
    SEARCH,
    Choice,
    Episode,
    World,
    answer_from_store,
    choices,
    label,
    load_data,
    musique_fact,
    rollout_item,
    split_questions,
    step,
)
from factutil import FactUtilConfig, compute_process_advantages
from factutil.metrics import qa_scores

ROOT = Path(__file__).resolve().parent.parent


@cache
def _data():
    questions, corpora, dropped = load_data()
    return questions, corpora, dropped, World(questions, corpora)


# --------------------------------------------------------------------------------------- data


def test_questions_have_real_answerable_chains():
    questions, corpora, dropped, _ = _data()
    by_dataset = {d: [q for q in questions if q.dataset == d] for d in ("2wiki", "musique")}
    # 2Wiki: 5 of the 30 + the KAG compositional record have their supporting paragraphs.
    assert len(by_dataset["2wiki"]) == 6 and len(by_dataset["musique"]) == 95
    assert dropped == {"2wiki: no supporting paragraph in the corpus": 25,
                       "musique: more than 3 steps": 5}
    assert len({q.uid for q in questions}) == len(questions)
    for question in questions:
        assert 2 <= len(question.facts) <= 3
        documents = {d.id: d for d in corpora[question.corpus]}
        for fact in question.facts:
            assert fact.uid == question.uid and fact.support in documents
            assert fact.subject.strip() and fact.relation.strip() and fact.object.strip()
        # The chain ends in the answer.
        assert qa_scores(question.facts[-1].object, list(question.answers))[0] == 1.0
    wiki = by_dataset["2wiki"][0]
    assert wiki.facts[0].subject == "Ștefan I. Nenițescu"
    support = {d.id: d for d in corpora["2wiki"]}[wiki.facts[1].support]
    assert support.title == "Ioan S. Nenițescu"


def test_split_is_disjoint_and_covers_both_datasets():
    questions = _data()[0]
    train, heldout = split_questions(questions)
    assert {q.uid for q in train}.isdisjoint({q.uid for q in heldout})
    assert len(train) + len(heldout) == len(questions)
    assert {q.dataset for q in heldout} == {"2wiki", "musique"}
    assert split_questions(questions) == (train, heldout)


@pytest.mark.parametrize(("step_", "answers", "title", "expected"), [
    ({"question": "Hello Love >> performer", "answer": "Hank Snow"}, ["Hank Snow"], "Hello Love",
     ("Hello Love", "performer", "Hank Snow")),
    ({"question": "#1 >> shares border with", "answer": "Avery County"},
     ["McDowell County", "Avery County"], "x", ("McDowell County", "shares border with",
                                                 "Avery County")),
    ({"question": "Midway (near Pleasant Plains), #2 , #1 >> country", "answer": "U.S."},
     ["Arkansas", "White County", "U.S."], "x",
     ("Midway (near Pleasant Plains), White County , Arkansas", "country", "U.S.")),
    ({"question": "Who was the first president of #1 ?", "answer": "Hassan Gouled Aptidon"},
     ["Djibouti", "Hassan Gouled Aptidon"], "Somalis",
     ("Djibouti", "who was the first president of", "Hassan Gouled Aptidon")),
    ({"question": "what was #1 's currency before the euro", "answer": "The Finnish markka"},
     ["Finland", "The Finnish markka"], "Finnish markka",
     ("Finland", "what was currency before the euro", "The Finnish markka")),
    ({"question": "What company published Journal of Psychotherapy Integration?",
      "answer": "American Psychological Association"}, ["American Psychological Association"],
     "Journal of Psychotherapy Integration",
     ("Journal of Psychotherapy Integration", "what company published",
      "American Psychological Association")),
])
def test_musique_steps_become_triples(step_, answers, title, expected):
    assert musique_fact(step_, answers, title) == expected


# -------------------------------------------------------------------------------- environment


def _question(uid_prefix: str):
    return next(q for q in _data()[0] if q.uid.startswith(uid_prefix))


def _option(world: World, episode: Episode, kind: str, fact_key: str | None = None,
            query: str | None = None) -> Choice:
    for option in choices(world, episode):
        if option.kind != kind:
            continue
        if kind == ASSERT and option.wording.fact.key == fact_key:
            return option
        if kind == SEARCH and option.query == query:
            return option
        if kind == ANSWER:
            return option
    raise AssertionError(f"no {kind} option {fact_key or query}")


def test_a_scripted_rollout_follows_the_chain_and_factutil_reads_every_action():
    world = _data()[3]
    question = _question("2wiki:019bed30")  # Ștefan I. Nenițescu -> father -> place of birth
    first, last = question.facts
    # Both facts as written (a rollout may draw a name variant that BM25 spells differently).
    episode = Episode(question, random.Random(0),
                      wording_of={f.key: world.wordings(f)[0] for f in question.facts})
    assert answer_from_store(episode) == EMPTY_ANSWER
    step(world, episode, _option(world, episode, SEARCH, query=question.question))
    assert first.key in {option.wording.fact.key for option in choices(world, episode)
                         if option.kind == ASSERT}
    step(world, episode, _option(world, episode, ASSERT, first.key))
    query = first.object  # the entity just stored finds hop 2
    assert label(episode, _option(world, episode, SEARCH, query=query)) == "search"
    step(world, episode, _option(world, episode, SEARCH, query=query))
    assert answer_from_store(episode) != last.object  # the store lacks the last fact yet
    step(world, episode, _option(world, episode, ASSERT, last.key))
    assert label(episode, _option(world, episode, ASSERT, last.key)) == "assert restated"
    step(world, episode, _option(world, episode, ANSWER))
    assert episode.done and episode.answer == last.object == "Galați"
    assert episode.gold_recall() == 1.0
    # An invalid output too; factutil reads each recorded action as the kind the policy chose.
    episode.actions.insert(0, {"raw": '{"action": "search", "query": "'})
    result = compute_process_advantages([rollout_item(episode, "u", "u-0")],
                                        FactUtilConfig(mode="exact"))
    assert [a.action for a in result.actions] == ["invalid", "search", "assert", "search",
                                                  "assert", "answer"]
    assert result.rollouts[0].em == 1.0


def test_a_later_same_relation_distractor_takes_the_answer():
    questions, _, _, world = _data()
    question = _question("2wiki:019bed30")
    first, last = question.facts
    other = next(f for q in questions if q.uid != question.uid for f in q.facts
                 if f.relation == last.relation)
    w = {fact.key: world.wordings(fact)[0] for fact in (first, last, other)}
    episode = Episode(question, random.Random(0), store=[w[first.key], w[other.key], w[last.key]])
    assert answer_from_store(episode) == last.object
    episode.store = [w[first.key], w[last.key], w[other.key]]
    assert answer_from_store(episode) == other.object
    episode.store = [w[first.key]]
    assert answer_from_store(episode) == first.object  # no fact of the asked relation


def test_offers_are_real_facts_and_deterministic():
    questions, _, _, world = _data()
    pool = {fact.key for fact in world.pool}
    for question in questions[:20]:
        for doc_id in world.search(question.corpus, question.question):
            offered = world.offers(question, doc_id)
            assert offered == world.offers(question, doc_id)
            assert all(f.key in pool for f in offered)
            gold = [f for f in offered if f.uid == question.uid]
            assert all(f.support == doc_id for f in gold)
            assert sum(f.uid != question.uid for f in offered) == 2
    wordings = world.wordings(questions[0].facts[0])
    assert wordings[0].kind == "written" and len(wordings) > 1


def test_a_rollout_stops_at_max_actions_without_an_answer():
    world = _data()[3]
    never_answer = np.zeros(N_FEATURES)
    never_answer[FEATURES.index("is_answer")] = -1e9
    episode, decisions = play(world, _question("musique"), never_answer,
                              np.random.default_rng(0), random.Random(0))
    assert episode.answer is None and len(episode.actions) == len(decisions) == MAX_ACTIONS


# -------------------------------------------------------------------------------- the trainer


def _batch_items(seed: int = 0, groups: int = 8):
    questions, _, _, world = _data()
    rng = np.random.default_rng(seed)
    items, decisions, owner = [], [], []
    for slot, question in enumerate(split_questions(questions)[0][:groups]):
        uid = f"{question.uid}@{slot}"
        for g in range(6):
            episode, taken = play(world, question, initial_weights(), rng,
                                  random.Random(slot * 6 + g))
            items.append(rollout_item(episode, uid, f"{uid}-{g}"))
            owner.extend([len(items) - 1] * len(taken))
            decisions.extend(taken)
    return items, decisions, np.asarray(owner)


@pytest.mark.parametrize("start", ["prompted", "cold"])
def test_the_text_run_reads_whole_search_r1_responses_into_the_same_actions(start):
    """retrieved_text gives each rollout as one Search-R1 response (search_r1_response: <search>,
    <information>Doc 1(Title: "T") ..., <assert>, <answer>, the invalid notice); read back by
    factutil it must give the retrieved run's per-action advantages exactly, the same alignment."""
    from benchmarks.credit_env import search_r1_response

    questions, _, _, world = _data()
    rng = np.random.default_rng(3)
    config = FactUtilConfig(facts="retrieved", group_size=6)
    for slot, question in enumerate(split_questions(questions)[0][:12]):
        episodes = [play(world, question, initial_weights(start), rng, random.Random(slot * 6 + g))[0]
                    for g in range(6)]
        actions = [rollout_item(e, "u", f"u-{g}") for g, e in enumerate(episodes)]
        texts = [rollout_item(e, "u", f"u-{g}", world) for g, e in enumerate(episodes)]
        assert all(set(t) == {"uid", "question", "golden_answers", "rollout_id", "response"}
                   for t in texts)
        assert all("<information>Doc 1(Title: \"" in search_r1_response(world, e)
                   for e in episodes if e.searched)
        pre_split = compute_process_advantages(actions, config)
        read = compute_process_advantages(texts, config)
        assert read.advantages.tolist() == pre_split.advantages.tolist()
        assert [a.action for a in read.actions] == [a.action for a in pre_split.actions]
        assert read.metrics["passages_cut"] == read.metrics["observations_unsplit"] == 0


def test_omega_zero_advantages_are_plain_grpo_outcome_advantages():
    items, decisions, owner = _batch_items()
    result = compute_process_advantages(items, FactUtilConfig(mode="exact", omega=0.0))
    assert len(result.advantages) == len(decisions)
    rewards = [r.outcome_reward for r in result.rollouts]
    grpo = np.concatenate([grpo_outcome_advantages(rewards[i:i + 6])
                           for i in range(0, len(rewards), 6)])
    assert np.any(grpo != 0)
    np.testing.assert_allclose(result.advantages, grpo[owner], rtol=0, atol=1e-5)
    process = compute_process_advantages(items, FactUtilConfig(mode="exact", omega=0.5))
    assert np.abs(process.advantages - grpo[owner]).max() > 0.05


def _random_batch(rng: np.random.Generator, size: int = 40) -> tuple[Batch, np.ndarray]:
    w_old = rng.normal(size=N_FEATURES)
    decisions = []
    for _ in range(size):
        n = int(rng.integers(2, 9))
        x = rng.normal(size=(n, N_FEATURES))
        logits = x @ w_old
        p = np.exp(logits - logits.max())
        p /= p.sum()
        chosen = int(rng.integers(n))
        decisions.append(Decision(x, chosen, float(np.log(p[chosen])), "search"))
    return Batch(decisions, rng.normal(size=size)), w_old


@pytest.mark.parametrize("shift", [0.0, 0.05, 0.6])
def test_clipped_surrogate_gradient_matches_finite_differences(shift):
    rng = np.random.default_rng(7)
    batch, w_old = _random_batch(rng)
    w = w_old + shift * rng.normal(size=N_FEATURES)
    value, grad = batch.surrogate_and_grad(w)
    numeric = np.zeros_like(grad)
    for i in range(N_FEATURES):
        e = np.zeros(N_FEATURES)
        e[i] = 1e-6
        numeric[i] = (batch.surrogate_and_grad(w + e)[0] - batch.surrogate_and_grad(w - e)[0]) / 2e-6
    np.testing.assert_allclose(grad, numeric, rtol=1e-4, atol=1e-6)
    if shift == 0.0:  # at the sampling policy every ratio is 1: the surrogate is the mean advantage
        assert value == pytest.approx(batch.advantages.mean())


def test_grpo_outcome_advantages_of_a_flat_group_are_zero():
    assert np.all(grpo_outcome_advantages([0.5] * 6) == 0)
    a = grpo_outcome_advantages([0, 0, 1, 0, 0, 1])
    assert a.sum() == pytest.approx(0) and a[2] > 0 > a[0]
    assert group_outcome([0] * 6) == "all fail" and group_outcome([1] * 6) == "all succeed"


def _without_timings(result: dict) -> dict:
    timing = {"rollout_s", "factutil_s", "update_s", "factutil_share", "wall_s"}
    return {**result, "records": [{k: v for k, v in r.items() if k not in timing}
                                   for r in result["records"]]}


@pytest.mark.parametrize("filter_groups", [False, True])
def test_train_run_is_deterministic_and_reports_every_iteration(filter_groups):
    questions, _, _, world = _data()
    train, heldout = split_questions(questions)
    settings = Settings(iterations=2, batch=3, eval_every=2, eval_samples=1,
                        filter_groups=filter_groups)
    run = next(r for r in RUNS if r.name == "exact")
    first = train_run(world, train[:10], heldout[:4], run, 0, settings)
    again = train_run(world, train[:10], heldout[:4], run, 0, settings)
    assert _without_timings(first) == _without_timings(again)
    records = first["records"]
    assert [r["iteration"] for r in records] == [0, 1, 2]
    assert "heldout" in records[0] and "heldout" in records[2] and "heldout" not in records[1]
    for record in records[1:]:
        assert 0 <= record["train_em"] <= 1 and 0 <= record["factutil_share"] <= 1
        assert record["groups_used"] <= 3 and record["groups_drawn"] >= record["groups_used"]
        if filter_groups:  # dynamic sampling keeps only groups whose EM differs
            assert all(k.startswith("mixed|") for k in record.get("process_by_kind", {}))
        else:
            assert record["groups_used"] == record["groups_drawn"] == 3


def test_paired_difference_by_hand():
    # d = (0.1, 0.2, 0.3, 0.4, 0.5): mean 0.3, sample sd sqrt(0.1 / 4) = 0.158114, standard error
    # 0.158114 / sqrt(5) = 0.0707107; t(0.975, 4 df) = 2.7764 (a t table) -> 0.3 ± 0.19632.
    stats = paired_difference([0.3, 0.4, 0.5, 0.6, 0.7], [0.2] * 5)
    assert stats["mean"] == pytest.approx(0.3)
    assert (stats["low"], stats["high"]) == pytest.approx((0.3 - 0.19632, 0.3 + 0.19632), abs=1e-5)
    assert (stats["ahead"], stats["seeds"]) == (5, 5)
    # Seeds behind count as not ahead; the interval is symmetric about the mean.
    mixed = paired_difference([0.1, 0.5, 0.2], [0.3, 0.3, 0.3])  # d = (-0.2, 0.2, -0.1)
    assert mixed["mean"] == pytest.approx(-0.1 / 3) and mixed["ahead"] == 1
    assert mixed["high"] - mixed["mean"] == pytest.approx(mixed["mean"] - mixed["low"])
    # One seed: no interval; equal differences: the interval is the point.
    one = paired_difference([0.5], [0.25])
    assert one["mean"] == 0.25 and math.isnan(one["low"]) and math.isnan(one["high"])
    same = paired_difference([0.5, 0.75], [0.25, 0.5])
    assert (same["low"], same["mean"], same["high"]) == (0.25, 0.25, 0.25)


def test_runs_pair_by_the_seeds_both_ran():
    rows = [
        {"block": "cold/plain", "run": "outcome_only", "seed_list": [0, 1, 2],
         "em_final_per_seed": [0.1, 0.2, 0.3], "recall_final_per_seed": [0.5, 0.5, 0.5]},
        {"block": "cold/plain", "run": "default", "seed_list": [1, 2, 3],
         "em_final_per_seed": [0.4, 0.4, 0.9], "recall_final_per_seed": [0.6, 0.7, 0.1]},
        {"block": "cold/filtered", "run": "loo", "seed_list": [0],
         "em_final_per_seed": [0.5], "recall_final_per_seed": [0.5]},
    ]
    add_paired(rows)
    # Seeds 1 and 2: EM (0.4 - 0.2, 0.4 - 0.3), recall (0.6 - 0.5, 0.7 - 0.5).
    em = rows[1]["paired"]["outcome_only"]["em"]
    assert em["seeds"] == 2 and em["mean"] == pytest.approx(0.15)
    assert rows[1]["paired"]["outcome_only"]["recall"]["mean"] == pytest.approx(0.15)
    assert "default" not in rows[1]["paired"] and rows[0]["paired"]["default"]["em"]["mean"] == (
        pytest.approx(-0.15))
    assert rows[2]["paired"] == {}  # nothing to compare with in its block


@pytest.mark.slow
@pytest.mark.integration
def test_quick_command_writes_tables_plot_and_results(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/credit_ablation.py"), "--quick", "--out",
         str(tmp_path)], capture_output=True, text=True, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ordering (prompted/plain)" in done.stdout
    report = json.loads((tmp_path / "results.json").read_text())
    assert {(r["block"], r["run"]) for r in report["summary"]} == {
        (b, r) for b in ("prompted/plain", "prompted/filtered", "cold/plain", "cold/filtered")
        for r in ("outcome_only", "default", "paper")}
    # "default" is the library's defaults; the other arms differ only in the fields they name.
    runs = {r["name"]: r for r in report["runs"]}
    assert runs["default"]["fields"] == {} and runs["paper"]["fields"] == {"preset": "paper"}
    # One seed: each difference is a value without an interval.
    paired = next(r for r in report["summary"] if r["run"] == "paper")["paired"]
    assert set(paired) == {"outcome_only", "default"} and paired["default"]["em"]["seeds"] == 1
    for row in report["summary"]:
        assert 0 <= row["em_final"] <= 1 and 0 <= row["recall_final"] <= 1
        assert 0 < row["factutil_share"] < 1 and row["actions_final"] <= MAX_ACTIONS
    for result in report["results"]:
        terms = [r["max_process_term"] for r in result["records"] if "max_process_term" in r]
        if result["run"] == "outcome_only":  # Ω = 0: the advantages used are GRPO's, exactly
            assert terms and max(terms) < 1e-5
        else:
            assert max(terms) > 0.01
    assert (tmp_path / "credit_ablation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (tmp_path / "table.md").read_text()
    assert "| outcome-only (Ω=0) |" in table and "Process term" in table
    assert "**Δ final EM vs outcome-only (Ω=0)**" in table


@pytest.mark.slow
@pytest.mark.integration
def test_more_seeds_join_an_earlier_run_with_merge(tmp_path):
    def run(*args):
        done = subprocess.run([sys.executable, str(ROOT / "benchmarks/credit_ablation.py"), *args],
                              capture_output=True, text=True, check=False, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    quick = ["--quick", "--blocks", "prompted/plain", "--runs", "outcome_only"]
    run(*quick, "--out", str(tmp_path / "a"))
    run(*quick, "--first-seed", "1", "--out", str(tmp_path / "b"))
    run("--merge", str(tmp_path / "a/results.json"), str(tmp_path / "b/results.json"),
        "--out", str(tmp_path / "m"))
    parts = [json.loads((tmp_path / f"{x}/results.json").read_text())["summary"][0] for x in "ab"]
    merged = json.loads((tmp_path / "m/results.json").read_text())
    assert merged["seeds"] == [0, 1] and [p["seed_list"] for p in parts] == [[0], [1]]
    row = merged["summary"][0]
    finals = parts[0]["em_final_per_seed"] + parts[1]["em_final_per_seed"]
    assert row["em_final_per_seed"] == finals
    assert row["em_final"] == pytest.approx(sum(finals) / 2)
    # --compact keeps what the tables read: merged again, the same table.
    run("--merge", str(tmp_path / "m/results.json"), "--compact", "--out", str(tmp_path / "c"))
    run("--merge", str(tmp_path / "c/results.json"), "--out", str(tmp_path / "cc"))
    assert (tmp_path / "c/table.md").read_text() == (tmp_path / "m/table.md").read_text()
    assert (tmp_path / "cc/table.md").read_text() == (tmp_path / "m/table.md").read_text()
    small = json.loads((tmp_path / "c/results.json").read_text())["results"][0]["records"]
    # merged again, a merge still names the runs' own files
    assert json.loads((tmp_path / "cc/results.json").read_text())["merged_from"] == [
        "a/results.json", "b/results.json"]
    assert {key for record in small for key in record} <= {
        "iteration", "heldout", "factutil_s", "factutil_share", "process_by_kind"}
    again = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/credit_ablation.py"), "--merge",
         str(tmp_path / "a/results.json"), str(tmp_path / "a/results.json"), "--out", str(tmp_path / "x")],
        capture_output=True, text=True, check=False, cwd=tmp_path)
    assert again.returncode != 0 and "already in an earlier file" in again.stderr


def _fake_result(seed: int, ems: dict[int, float], process: dict[int, dict]) -> dict:
    records = [{"iteration": i, **({"heldout": {"em": ems[i]}} if i in ems else {}),
                **({"process_by_kind": process[i]} if i in process else {})}
               for i in range(max(ems) + 1)]
    return {"run": "default", "block": "cold/plain", "seed": seed, "records": records}


def test_fate_table_splits_the_process_term_by_seeds_that_take_off():
    """Seed 0 stays below 0.40; seed 1 reaches 0.45 at iteration 6. Seed 0's all-fail answers:
    terms -0.1 and -0.3 at iteration 1 and one -0.2 at iteration 20 (outside 1–15): mean -0.2,
    sd sqrt(((0.1)^2 + (0.1)^2) / 2) = 0.1. Seed 1's mixed gold asserts: 0.5 and 0.1 -> 0.300 ± 0.200."""
    stays = _fake_result(0, {0: 0.0, 3: 0.1, 21: 0.1},
                         {1: {"all fail|answer": [-0.4, 2, 0.1]},
                          20: {"all fail|answer": [-0.2, 1, 0.04]}})
    leaves = _fake_result(1, {0: 0.0, 3: 0.2, 6: 0.45},
                          {2: {"mixed|assert gold": [0.6, 2, 0.26]}})
    table = fate_table([stays, leaves], "default", "cold/plain", 0.40)
    cells = {row[0]: row[1:] for row in ([c.strip() for c in line.strip("|").split("|")]
                                         for line in table.splitlines())}
    # Columns: all fail (stay, take off), mixed (stay, take off).
    assert cells["answer"] == ["-0.200 ± 0.100 (n=2)", "—", "—", "—"]
    assert cells["assert gold"] == ["—", "—", "—", "+0.300 ± 0.200 (n=2)"]
    assert "seeds that stay (1)" in table and "seeds that take off (1)" in table


def test_a_run_cut_at_an_iteration_is_its_first_iterations():
    result = _fake_result(0, {0: 0.0, 3: 0.1, 6: 0.5}, {})
    cut = cut_at(result, 3)
    assert [r["iteration"] for r in cut["records"]] == [0, 1, 2, 3]
    assert cut["records"][-1]["heldout"]["em"] == 0.1
    with pytest.raises(SystemExit, match="no evaluation there"):
        cut_at(result, 4)
