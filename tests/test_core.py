"""The pure functions of each step of docs/method.md, checked against values worked by hand."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from pydantic import ValidationError

from factutil import FactUtilConfig, Group, InputError, Rollout, Triple, compute_process_advantages
from factutil.advantages import total_advantages
from factutil.cluster import (
    ExactClusterer,
    SemanticClusterer,
    canonical_labels,
    cluster_triples,
    make_clusterer,
    normalize_fact_text,
    representatives,
    triple_text,
)
from factutil.config import ConfigError, config_from_values
from factutil.shaping import (
    ANSWER,
    ASSERT,
    INVALID,
    SEARCH,
    back_credit,
    shaping_rewards,
)
from factutil.utility import PriorRiskWarning
from tests.reference import (
    cluster_utilities,
    group_normalize,
    outcome_advantages,
    process_advantages,
    rollout_process_rewards,
    store_potentials,
)


def test_fact_text_normalisation():
    assert normalize_fact_text("  Ｐａｒｉｓ\tIS  the\nCAPITAL ") == "paris is the capital"
    assert normalize_fact_text("Straße") == "strasse"  # case-fold, not lower()
    triple = Triple(subject="France", relation=" capital", object="Paris ")
    assert triple_text(triple) == "france | capital | paris"
    assert triple_text(triple, "{object} <- {relation} - {subject}") == "paris <- capital - france"


def test_triple_accepts_list_and_rejects_bad_parts():
    assert Triple.model_validate(["a", "b", "c"]).as_list() == ["a", "b", "c"]
    with pytest.raises(ValidationError, match="3 parts"):
        Triple.model_validate(["a", "b"])
    with pytest.raises(ValidationError, match="relation"):
        Triple(subject="a", relation="  ", object="c")


def test_canonical_labels_order_by_smallest_member():
    assert canonical_labels(np.array([7, 3, 7, 5])).tolist() == [0, 1, 0, 2]
    facts = [Triple.model_validate(t) for t in (["b", "r", "o"], ["B", "R", "O"], ["a", "r", "o"])]
    texts, reps = representatives(facts)
    assert texts == ["a | r | o", "b | r | o"]
    assert [r.as_list() for r in reps] == [["a", "r", "o"], ["B", "R", "O"]]  # smallest parts win
    assert ExactClusterer().cluster_batch([reps, []])[0].tolist() == [0, 1]
    assert [x.tolist() for x in cluster_triples(ExactClusterer(), [facts])] == [[1, 1, 0]]
    assert isinstance(make_clusterer(FactUtilConfig(mode="exact")), ExactClusterer)
    assert isinstance(make_clusterer(FactUtilConfig()), SemanticClusterer)


def test_cluster_utilities_by_hand():
    membership = np.array([[1, 1, 0], [1, 0, 0], [0, 0, 1], [0, 0, 0]], dtype=bool)
    success = np.array([1.0, 0.0, 0.5, 1.0])
    table = cluster_utilities(membership, success, epsilon=0.5, prior="beta")  # the paper's
    assert table.baseline == 0.625
    assert table.n.tolist() == [2, 1, 1]
    assert table.s.tolist() == [1.0, 1.0, 0.5]
    assert table.mean.tolist() == [1.5 / 3, 1.5 / 2, 1.0 / 2]
    assert table.utility.tolist() == pytest.approx([0.5 - 0.625, 0.75 - 0.625, 0.5 - 0.625])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        cluster_utilities(membership, np.array([1.5, 0, 0, 0]))
    with pytest.raises(ValueError, match="epsilon"):
        cluster_utilities(membership, success, epsilon=0.0)


def test_leave_one_out_utilities_by_hand():
    # y = (1, 0, 0.5, 1); rollout 0 holds clusters 0 and 1, rollout 1 cluster 0, rollout 2 cluster 2.
    membership = np.array([[1, 1, 0], [1, 0, 0], [0, 0, 1], [0, 0, 0]], dtype=bool)
    success = np.array([1.0, 0.0, 0.5, 1.0])
    # Group prior, eps = 0.5, so n' + 2 eps = n' + 1.
    # Rollout 0: mates (0, 0.5, 1), mean 0.5. Cluster 0: mate rollout 1, (0 - 0.5) / (1 + 1) = -0.25;
    #   cluster 1: no mate, 0 / (0 + 1) = 0.
    # Rollout 1: mates (1, 0.5, 1), mean 2.5/3. Cluster 0: mate rollout 0, (1 - 2.5/3) / 2 = 1/12.
    # Rollout 2: cluster 2 has no mate: 0.
    table = cluster_utilities(membership, success, epsilon=0.5, utility_from="loo")
    np.testing.assert_allclose(
        table.rollout_utility, [[-0.25, 0, 0], [1 / 12, 0, 0], [0, 0, 0], [0, 0, 0]], atol=1e-15)
    # The per-cluster utilities stay the group's: u_0 = ((1 - 0.625) + (0 - 0.625)) / (2 + 1).
    assert table.utility[0] == pytest.approx(-0.25 / 3)
    # Beta prior: u = (s' + 0.5) / (n' + 1) - mean of the mates.
    # Rollout 0, cluster 0: (0 + 0.5) / 2 - 0.5 = -0.25; cluster 1: 0.5 / 1 - 0.5 = 0.
    # Rollout 1, cluster 0: (1 + 0.5) / 2 - 2.5/3 = -1/12. Rollout 2, cluster 2: 0.5 - 2/3 = -1/6.
    beta = cluster_utilities(membership, success, epsilon=0.5, prior="beta", utility_from="loo")
    np.testing.assert_allclose(
        beta.rollout_utility, [[-0.25, 0, 0], [-1 / 12, 0, 0], [0, 0, -1 / 6], [0, 0, 0]], atol=1e-15)
    # Without leave-one-out every holder reads u_c.
    plain = cluster_utilities(membership, success, epsilon=0.5)
    assert plain.rollout_utility[:, 0].tolist() == [plain.utility[0]] * 2 + [0.0, 0.0]
    # A rollout alone in its group has no mates: it reads 0 under either prior.
    for prior in ("group", "beta"):
        alone = cluster_utilities(np.ones((1, 1), dtype=bool), np.array([1.0]), prior=prior,
                                  utility_from="loo")
        assert alone.rollout_utility.tolist() == [[0.0]]
    with pytest.raises(ValueError, match="utility must be 'group' or 'loo', got 'mean'"):
        cluster_utilities(membership, success, utility_from="mean")


def test_potential_shaping_and_back_credit_by_hand():
    utility = np.array([0.3, -0.1, 0.2])
    new = [np.array([], int), np.array([0, 1]), np.array([], int), np.array([2]), np.array([], int)]
    potential = store_potentials(new, utility)
    assert potential.tolist() == pytest.approx([0, math.tanh(0.2), math.tanh(0.2), math.tanh(0.4), math.tanh(0.4)])
    shaping = shaping_rewards(potential)
    assert shaping.tolist() == pytest.approx([0, math.tanh(0.2), 0, math.tanh(0.4) - math.tanh(0.2), 0])
    kinds = np.array([SEARCH, ASSERT, SEARCH, ASSERT, ANSWER])
    credit = back_credit(kinds, shaping, alpha=0.25)
    f1, f2 = shaping[1], shaping[3]
    assert credit.tolist() == pytest.approx([0.25 * f1, -0.25 * f1, 0.25 * f2, -0.25 * f2, 0])
    # gamma < 1: F = gamma * Phi(S') - Phi(S) on every action.
    discounted = shaping_rewards(potential, gamma=0.9)
    assert discounted[2] == pytest.approx(0.9 * math.tanh(0.2) - math.tanh(0.2))


def test_assert_with_no_earlier_search_keeps_all():
    credit = back_credit(np.array([ASSERT, SEARCH]), np.array([0.4, 0.0]), alpha=0.2)
    assert credit.tolist() == [0.0, 0.0]


def test_penalties_and_empty_store_answer():
    kinds = np.array([INVALID, SEARCH, SEARCH, ANSWER])
    parts = rollout_process_rewards(
        kinds, [np.array([], int)] * 4, np.zeros(0), np.array([False, False, True, False]),
        invalid_penalty=-0.3, repeat_search_penalty=-0.2, empty_store_answer_penalty=-0.5,
    )
    assert parts.penalty.tolist() == [-0.3, 0.0, -0.2, -0.5]
    assert parts.empty_store_answer.tolist() == [False, False, False, True]
    assert parts.process_reward.tolist() == [-0.3, 0.0, -0.2, -0.5]


def test_group_normalize_by_hand_and_degenerate_groups():
    values = np.array([1.0, 0.0, 0.0, 1.0])
    std = math.sqrt(1 / 3)  # ddof = 1: sum of squares 1.0 over n - 1 = 3
    a = 0.5 / (std + 1e-6)
    assert group_normalize(values).tolist() == pytest.approx([a, -a, -a, a])
    assert group_normalize(values, by_std=False).tolist() == [0.5, -0.5, -0.5, 0.5]
    # 0.1 * 3 is not exactly representable: a constant group must still give exact zeros.
    assert group_normalize(np.array([0.1, 0.1, 0.1])).tolist() == [0.0, 0.0, 0.0]
    assert group_normalize(np.array([0.7])).tolist() == [0.0]
    assert outcome_advantages(np.array([])).tolist() == []
    with pytest.raises(ValueError, match="finite"):
        group_normalize(np.array([1.0, np.nan]))
    assert process_advantages(np.array([0.2, -0.1]), mode="none").tolist() == [0.2, -0.1]
    with pytest.raises(ValueError, match="process_norm"):
        process_advantages(np.array([0.2]), mode="batch")
    total = total_advantages(np.array([1.0, -1.0]), np.array([2.0, 0.0, -2.0]), np.array([0, 0, 1]), 0.5)
    assert total.tolist() == [2.0, 1.0, -2.0]


def test_config_validation_names_field_and_value():
    for fields, name in [
        ({"epsilon": 0}, "epsilon"), ({"alpha": 1.5}, "alpha"), ({"omega": -0.1}, "omega"),
        ({"invalid_penalty": 0.1}, "invalid_penalty"), ({"gamma": 0}, "gamma"),
        ({"mode": "fuzzy"}, "mode"), ({"triple_template": "{subject} {object}"}, "triple_template"),
        ({"omega": float("nan")}, "omega"), ({"omgea": 0.3}, "omgea"), ({"max_turns": 0}, "max_turns"),
    ]:
        with pytest.raises(ValidationError) as error:
            FactUtilConfig(**fields)
        assert name in str(error.value)
    assert FactUtilConfig().omega == 0.5 and FactUtilConfig().alpha == 0.2 and FactUtilConfig().epsilon == 0.5


def test_a_misspelt_config_field_is_named_with_the_closest_one_in_every_form():
    """FactUtilConfig(omgea=...), a dict config of the step and the CLI's / adapters' helper all
    say "unknown field 'omgea' (did you mean 'omega'?)"; a key close to no field is just named;
    the config's other problems are still listed beside it."""
    expected = "unknown field 'omgea' (did you mean 'omega'?)"
    with pytest.raises(ValidationError) as error:
        FactUtilConfig(omgea=0.3)
    assert [(e["loc"], e["msg"]) for e in error.value.errors()] == [(("omgea",), expected)]
    with pytest.raises(ConfigError) as error:
        compute_process_advantages([], {"mode": "exact", "omgea": 0.3})
    assert str(error.value) == f"config: omgea: {expected}"
    with pytest.raises(ConfigError) as error:
        config_from_values({"omega": -1, "zzz": 1})
    assert str(error.value) == ("config: omega: Input should be greater than or equal to 0 (got -1)\n"
                                "config: zzz: unknown field 'zzz'")


def test_group_validation():
    def rollout(rid, uid="q", gold=("a",)):
        return Rollout(uid=uid, question="?", golden_answers=list(gold), rollout_id=rid, actions=[])

    with pytest.raises(ValidationError, match="repeats"):
        Group.from_rollouts([rollout("1"), rollout("1")])
    with pytest.raises(ValidationError, match="uid"):
        Group.from_rollouts([rollout("1"), rollout("2", uid="other")])
    with pytest.raises(ValidationError, match="golden_answers"):
        Group.from_rollouts([rollout("1"), rollout("2", gold=("b",))])
    with pytest.raises(ValidationError, match="golden_answers"):
        rollout("1", gold=(" ",))
    with pytest.raises(ValidationError, match="finite"):
        Rollout(uid="q", question="?", golden_answers=["a"], rollout_id="1", actions=[], reward=float("inf"))
    with pytest.raises(ValidationError, match="number"):
        Rollout.model_validate({"uid": "q", "question": "?", "golden_answers": ["a"], "rollout_id": "1", "actions": [], "reward": "0.5"})


def test_unknown_keys_kept_in_metadata_and_structured_assert_problems_are_invalid_actions():
    rollout = Rollout.model_validate({
        "uid": "q", "question": "?", "golden_answers": ["a"], "rollout_id": "1", "step_count": 3,
        "actions": [
            {"action": "assert", "triples": []},
            {"action": "assert", "triples": [["a", "", "c"]]},
            {"action": "assert", "facts": [["a", "b", "c"]]},
        ],
    })
    assert rollout.metadata == {"step_count": 3}
    assert [a.action for a in rollout.actions] == ["invalid", "invalid", "assert"]
    assert rollout.actions[0].reason == "assert with no triple"
    assert rollout.actions[1].reason == "triple 0 has an empty relation"


def test_groups_keyed_by_uid_not_question():
    rows = [
        {"uid": "u1", "question": "same", "golden_answers": ["a"], "rollout_id": "1", "actions": []},
        {"uid": "u2", "question": "same", "golden_answers": ["a"], "rollout_id": "1", "actions": []},
    ]
    result = compute_process_advantages(rows, {"mode": "exact"})
    assert result.metrics["groups"] == 2.0
    with pytest.raises(ValueError, match="two groups"):
        compute_process_advantages([Group.from_rollouts([Rollout.model_validate(rows[0])])] * 2)


def test_success_modes_and_supplied_reward():
    row = {"uid": "q", "question": "?", "golden_answers": ["New York City"], "rollout_id": "1",
           "actions": [{"action": "assert", "triples": [["x", "y", "z"]]},
                       {"action": "answer", "answer": "New York"}], "reward": 0.9}
    other = dict(row, rollout_id="2", reward=None, actions=[])
    for success, expected in [("em", 0.0), ("f1", 0.8), ("reward", 0.9)]:
        result = compute_process_advantages([row, other], {"mode": "exact", "success": success})
        assert result.rollouts[0].success == pytest.approx(expected)
        assert result.rollouts[0].outcome_reward == 0.9  # the supplied reward replaces F1
        assert result.clusters[0].s == pytest.approx(expected)
    clipped = compute_process_advantages([dict(row, reward=1.7), other], {"mode": "exact", "success": "reward"})
    assert clipped.rollouts[0].success == 1.0


def test_empty_batch_and_rollout_without_actions():
    empty = compute_process_advantages([], {"mode": "exact"})
    assert empty.advantages.shape == (0,) and empty.metrics["groups"] == 0.0
    row = {"uid": "q", "question": "?", "golden_answers": ["a"], "rollout_id": "1", "actions": []}
    result = compute_process_advantages([row, dict(row, rollout_id="2")], {"mode": "exact"})
    assert result.advantages.shape == (0,)
    assert all(math.isfinite(v) for v in result.metrics.values())


def test_skip_invalid_groups_scores_the_rest():
    good = {"uid": "g", "question": "?", "golden_answers": ["a"], "rollout_id": "1",
            "actions": [{"action": "answer", "answer": "a"}]}
    bad = dict(good, uid="b", golden_answers=[""])
    with pytest.raises(InputError, match=r"groups\[1\] \(uid 'b', rollout_id '1'\): golden_answers: "):
        compute_process_advantages([good, bad], {"mode": "exact"})
    result = compute_process_advantages([good, dict(good, rollout_id="2"), bad], {"mode": "exact"},
                                        on_invalid_group="skip")
    assert list(result.skipped) == ["b"] and "golden_answers" in result.skipped["b"]
    assert result.metrics["groups"] == 1.0 and result.metrics["groups_skipped"] == 1.0
    assert [r.uid for r in result.actions] == ["g", "g"]
    assert any("skipped" in w for w in result.warnings)
    with pytest.raises(ValueError, match="on_invalid_group"):
        compute_process_advantages([good], on_invalid_group="ignore")


def _fail_and_mixed_groups():
    """Group "fail": both rollouts wrong; group "mixed": y = (1, 0); each asserts one fact."""

    def rollout(uid, rid, answer, fact):
        return {"uid": uid, "question": "?", "golden_answers": ["Paris"], "rollout_id": rid,
                "actions": [{"action": "search", "query": "q"},
                            {"action": "assert", "triples": [fact]},
                            {"action": "answer", "answer": answer}]}

    return [rollout("fail", "1", "b", ["x", "r", "y"]), rollout("fail", "2", "c", ["z", "r", "w"]),
            rollout("mixed", "1", "Paris", ["x", "r", "y"]), rollout("mixed", "2", "c", ["z", "r", "w"])]


def test_uniform_groups_zero_removes_shaping_only_where_every_rollout_scored_the_same():
    rows = _fail_and_mixed_groups()
    with pytest.warns(PriorRiskWarning):  # 1 of 2 groups failed in every rollout, under Beta
        keep = compute_process_advantages(rows, {"mode": "exact", "preset": "paper"})
    # The paper's prior in an all-fail group: p-bar = 0, every cluster m = 0.5 / 2 = 0.25 > 0.
    assert [c.utility for c in keep.clusters if c.uid == "fail"] == [0.25, 0.25]
    zero = compute_process_advantages(
        rows, {"mode": "exact", "preset": "paper", "uniform_groups": "zero"})
    assert [c.utility for c in zero.clusters if c.uid == "fail"] == [0.0, 0.0]
    assert all(r.shaping == 0.0 for r in zero.actions if r.uid == "fail")
    mixed = [c.utility for c in keep.clusters if c.uid == "mixed"]
    assert mixed == [0.25, -0.25]  # y = (1, 0): m = 0.75 and 0.25 around p-bar 0.5
    assert [c.utility for c in zero.clusters if c.uid == "mixed"] == mixed
    assert zero.metrics["groups_uniform_zeroed"] == 1.0
    assert keep.metrics["groups_uniform_share"] == zero.metrics["groups_uniform_share"] == 0.5


def test_the_paper_prior_warns_once_per_process_when_half_the_groups_all_failed():
    """docs/method.md §3: a step with at least half of its groups failing in every rollout, under
    prior="beta" with uniform groups kept, warns (naming the risk and the switch) once, not once
    per step; the default prior, uniform_groups="zero" and a step with fewer such groups do not."""
    rows = _fail_and_mixed_groups()
    paper = {"mode": "exact", "preset": "paper"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's own filter for a UserWarning
        for _ in range(3):
            compute_process_advantages(rows, paper)
    assert [w.category for w in caught] == [PriorRiskWarning]
    assert "prior='beta'" in str(caught[0].message) and "prior='group'" in str(caught[0].message)
    mixed_more = rows + [{**row, "uid": "mixed2"} for row in rows[2:]]  # 1 of 3 groups all fail
    with warnings.catch_warnings():
        warnings.simplefilter("error", PriorRiskWarning)
        compute_process_advantages(rows, {"mode": "exact"})
        compute_process_advantages(rows, {**paper, "uniform_groups": "zero"})
        result = compute_process_advantages(mixed_more, paper)
    assert result.metrics["groups_uniform_share"] == pytest.approx(1 / 3)


def test_a_clusterer_built_for_another_clustering_config_is_refused(char_grams):
    """A clusterer whose mode or clustering fields differ from the call's config -> ValueError
    naming each field with both values (the clusterer would otherwise silently win); speed-only
    fields (cache bounds, batch size) and a matching clusterer pass; a custom clusterer without a
    config is used as given."""
    row = {"uid": "q", "question": "?", "golden_answers": ["Paris"], "rollout_id": "1",
           "actions": [{"action": "assert", "triples": [["France", "capital", "Paris"]]},
                       {"action": "answer", "answer": "Paris"}]}
    with pytest.raises(ValueError, match=r"\(mode: clusterer 'exact', config 'semantic'\)"):
        compute_process_advantages([row], FactUtilConfig(), clusterer=ExactClusterer())
    built = FactUtilConfig(sim_threshold=0.8, filters=("negation",))
    clusterer = SemanticClusterer(built, embedder=char_grams)
    call = FactUtilConfig(sim_threshold=0.95, filters=("negation", "numeric"))
    with pytest.raises(ValueError) as caught:
        compute_process_advantages([row], call, clusterer=clusterer)
    assert ("(sim_threshold: clusterer 0.8, config 0.95; filters: clusterer ('negation',), config "
            "('negation', 'numeric'))") in str(caught.value)
    with pytest.raises(ValueError, match="mode: clusterer 'semantic', config 'exact'"):
        compute_process_advantages([row], built.model_copy(update={"mode": "exact"}),
                                   clusterer=clusterer)
    same = built.model_copy(update={"cache_max_entries": 10, "embedding_batch_size": 8})
    assert compute_process_advantages([row], same, clusterer=clusterer).metrics["clusters"] == 1.0

    class Custom:
        def __init__(self) -> None:
            self.metrics: dict[str, float] = {}

        def cluster_batch(self, facts_per_group):
            return [np.zeros(len(facts), dtype=np.int64) for facts in facts_per_group]

    assert compute_process_advantages([row], FactUtilConfig(), clusterer=Custom()).metrics[
        "clusters"] == 1.0


def test_invalid_actions_carry_their_reason_in_the_output_rows():
    """A two-part triple and prose with no action -> ``invalid_reason`` on their records and in
    ``to_dict()`` (the ``factutil score`` line); valid actions have None."""
    row = {"uid": "q", "question": "?", "golden_answers": ["Paris"], "rollout_id": "1",
           "actions": [{"action": "assert", "triples": [["France", "Paris"]]},
                       {"raw": "I think I should look this up."},
                       {"action": "answer", "answer": "Paris"}]}
    records = compute_process_advantages([row], {"mode": "exact"}).actions
    assert [r.action for r in records] == ["invalid", "invalid", "answer"]
    assert [r.to_dict()["invalid_reason"] for r in records] == [
        "triple 0 has 2 parts, expected 3", "no action found", None]


def test_the_package_exports_the_step_its_inputs_and_nothing_else():
    """``factutil.__all__`` is the small public surface; everything else lives in its module."""
    import factutil

    assert set(factutil.__all__) == {
        "compute_process_advantages", "ProcessAdvantages", "FactUtilConfig", "Group", "Rollout",
        "Triple", "Action", "SearchAction", "AssertAction", "AnswerAction", "InvalidAction",
        "read_groups", "Clusterer", "make_clusterer", "InputError", "__version__"}
    assert all(hasattr(factutil, name) for name in factutil.__all__)
    assert factutil.make_clusterer is make_clusterer and not hasattr(factutil, "SemanticClusterer")


def test_all_fail_group_under_prior_group_gives_zero_utility_and_mixed_groups_are_centred():
    rows = _fail_and_mixed_groups()
    result = compute_process_advantages(rows, {"mode": "exact", "prior": "group"})
    assert [c.utility for c in result.clusters if c.uid == "fail"] == [0.0, 0.0]
    # y = (1, 0), p-bar 0.5: u = (s - n p-bar) / (n + 1) = (1 - 0.5) / 2 and (0 - 0.5) / 2.
    assert [c.utility for c in result.clusters if c.uid == "mixed"] == [0.25, -0.25]
    assert [c.mean for c in result.clusters if c.uid == "mixed"] == [0.75, 0.25]


def test_presets_set_their_fields_and_explicit_fields_win():
    default = FactUtilConfig()
    assert (default.preset, default.prior, default.process_norm) == ("default", "group", "group")
    assert (default.utility, default.uniform_groups) == ("group", "keep")
    paper = FactUtilConfig(preset="paper")  # the published method: the prior and raw term differ
    assert (paper.prior, paper.process_norm, paper.repeat_search_penalty) == ("beta", "none", -0.01)
    assert paper.model_dump(exclude={"preset", "prior", "process_norm"}) == default.model_dump(
        exclude={"preset", "prior", "process_norm"})
    # Passages as the facts keep the raw term unless asked (docs/decisions.md); a preset's wins.
    assert FactUtilConfig(facts="retrieved").process_norm == "none"
    assert FactUtilConfig(facts="retrieved", preset="plain_grpo").process_norm == "group"
    assert FactUtilConfig(facts="retrieved", process_norm="group").process_norm == "group"
    assert FactUtilConfig(preset="paper", prior="group").prior == "group"
    plain = FactUtilConfig(preset="plain_grpo")  # the defaults by name
    assert plain.model_dump(exclude={"preset"}) == default.model_dump(exclude={"preset"})
    assert plain.omega == paper.omega and plain.repeat_search_penalty == -0.01
    assert FactUtilConfig(preset="plain_grpo", process_norm="none").process_norm == "none"
    # A dumped config loads back to itself.
    assert FactUtilConfig.model_validate(plain.model_dump()) == plain
    with pytest.raises(ValueError, match="preset"):
        FactUtilConfig(preset="grpo")
