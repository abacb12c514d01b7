"""SearchR1Rollout: a Search-R1-style agent in TRL (no FactAgent prompt), its tokens, mask and
payload with the real BM25 retriever over the bundled corpus, and its searches credited for the
passages they retrieved (``facts="retrieved"``) by FactUtilGRPOTrainer on TRL's real GRPOTrainer."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from factutil import FactUtilConfig, compute_process_advantages
from factutil.tools.retrieval import RetrievalClient
from trl_testkit import grpo_args, tiny_model

from factutil_trl import SearchR1Rollout, factagent_reward
from factutil_trl.search_r1 import cut_at_stop

STOP = ("</search>", "</answer>")

QUESTION = "Who directed the film Polish-Russian War?"
GOLD = "Xawery Żuławski"
GOOD = "Polish-Russian War director"
BAD = "capital of France"
# Search-R1's notice, written out here rather than imported: the test checks the text itself
NOTICE = (
    "My previous action is invalid. If I want to search, I should put the query between "
    "<search> and </search>. If I want to give the final answer, I should put the answer between "
    "<answer> and </answer>. Let me try again."
)
EOS = "<eos>"  # in a script: the turn ends with the tokenizer's end-of-turn token


def client(url: str) -> RetrievalClient:
    return RetrievalClient(url, topk=2, max_observation_chars=300)


def block(text: str) -> str:
    """Search-R1's block: the retrieved text stripped, between the tags and blank lines."""
    return f"\n\n<information>{text.strip()}</information>\n\n"


def encode(tokenizer: Any, text: str) -> list[int]:
    ids = tokenizer.encode(text.removesuffix(EOS), add_special_tokens=False)
    return ids + [tokenizer.eos_token_id] if text.endswith(EOS) else ids


class Scripts:
    """``generate``: each episode writes its own script, one text per turn. An episode is known by
    its context (the longest earlier context of an episode that starts it); a new one takes the
    next script."""

    def __init__(self, tokenizer: Any, scripts: list[list[str]]):
        self.tokenizer = tokenizer
        self.scripts = [list(script) for script in scripts]
        self.contexts: list[list[int]] = []
        self.turns: list[int] = []

    def __call__(self, trainer, contexts, max_new_tokens):
        out = []
        for context in contexts:
            known = [k for k, c in enumerate(self.contexts) if context[: len(c)] == c]
            if known:
                episode = max(known, key=lambda k: len(self.contexts[k]))
            else:
                episode = len(self.contexts)
                self.contexts.append([])
                self.turns.append(0)
            script = self.scripts[episode]
            text = script[self.turns[episode]] if self.turns[episode] < len(script) else EOS
            self.turns[episode] += 1
            ids = encode(self.tokenizer, text)[:max_new_tokens]
            # what the rollout keeps of the turn: up to its stop string
            self.contexts[episode] = list(context) + cut_at_stop(ids, self.tokenizer, STOP)
            out.append(ids)
        return out


def trainer_stub(tokenizer: Any, limit: int | None = 4096) -> SimpleNamespace:
    return SimpleNamespace(processing_class=tokenizer, eos_token_ids=[tokenizer.eos_token_id],
                           max_completion_length=limit)


def recording_trainer(seen: dict[str, Any]) -> type:
    """``FactUtilGRPOTrainer`` that puts into ``seen`` TRL's own advantages (``"trl"``), the
    batch's rows and the step's output."""
    from factutil_trl import FactUtilGRPOTrainer

    class Recording(FactUtilGRPOTrainer):
        def _add_process_advantages(self, inputs, output):
            seen["trl"] = output["advantages"].clone()
            super()._add_process_advantages(inputs, output)
            seen["rows"], seen["output"] = [dict(row) for row in inputs], dict(output)

    return Recording


def test_cut_at_stop_keeps_the_stop_string_and_nothing_after(byte_tokenizer):
    tok = byte_tokenizer
    ids = tok.encode("a <search>q</search> <information>made up", add_special_tokens=False)
    assert tok.decode(cut_at_stop(ids, tok, ("</search>", "</answer>"))) == "a <search>q</search>"
    plain = tok.encode("no tags here", add_special_tokens=False)
    assert cut_at_stop(plain, tok, ("</search>",)) == plain
    assert cut_at_stop(ids, tok, ()) == ids


def test_one_episode_tokens_mask_spans_and_payload(byte_tokenizer, retrieval_url):
    tok = byte_tokenizer
    turns = [
        f"I will look it up. <search>{GOOD}</search> <information>invented",  # ran past the stop
        "x" * 80,  # no tag, cut at the turn's budget: invalid
        f"<answer>{GOLD}</answer>{EOS}",
    ]
    rollout = SearchR1Rollout(client(retrieval_url), generate=Scripts(tok, [turns]),
                              max_action_tokens=64)
    out = rollout([QUESTION], trainer_stub(tok))
    prompt = tok.decode(out["prompt_ids"][0])
    assert prompt == tok.apply_chat_template([{"role": "user", "content": QUESTION}],
                                             add_generation_prompt=True, tokenize=False)
    completion, mask = out["completion_ids"][0], out["env_mask"][0]
    observation = client(retrieval_url).search(GOOD).observation
    texts = [f"I will look it up. <search>{GOOD}</search>", block(observation),
             "x" * 64, f"\n{NOTICE}\n", f"<answer>{GOLD}</answer>",  # cut at its stop string
             tok.decode([tok.eos_token_id])]  # the episode's end, outside the loss
    assert tok.decode(completion) == "".join(texts)
    model = [1, 0, 1, 0, 1, 0]
    want = [m for text, m in zip(texts, model)
            for _ in tok.encode(text, add_special_tokens=False)]
    assert mask == want
    payload = out["factutil"][0]
    spans = payload["spans"]
    assert [tok.decode(completion[s:e]) for s, e in spans] == [texts[0], texts[2], texts[4]]
    assert [a["action"] for a in payload["actions"]] == ["search", "invalid", "answer"]
    assert payload["actions"][0]["query"] == GOOD
    assert payload["actions"][0]["observation"] == observation
    assert payload["answer"] == GOLD and payload["store_size"] is None
    assert factagent_reward([None], factutil=[payload], golden_answers=[[GOLD]]) == [1.0]


def test_a_turn_that_stops_without_a_tag_gets_the_notice_and_the_turn_limit_ends(
    byte_tokenizer, retrieval_url
):
    """Search-R1's rule, as every adapter applies it: only an answer or the turn limit ends an
    episode; a turn with neither search nor answer (here one that ends with the end of turn) gets
    the invalid-action notice and another turn."""
    out = SearchR1Rollout(client(retrieval_url), generate=Scripts(byte_tokenizer, [[
        f"<search>{GOOD}</search>", f"I do not know.{EOS}", f"<answer>{GOLD}</answer>"]]))(
        [QUESTION], trainer_stub(byte_tokenizer))
    payload = out["factutil"][0]
    assert [a["action"] for a in payload["actions"]] == ["search", "invalid", "answer"]
    assert payload["answer"] == GOLD and len(payload["spans"]) == 3
    assert f"I do not know.{byte_tokenizer.decode([byte_tokenizer.eos_token_id])}\n{NOTICE}\n" in (
        byte_tokenizer.decode(out["completion_ids"][0]))
    out = SearchR1Rollout(client(retrieval_url), max_turns=2, generate=Scripts(byte_tokenizer, [[
        f"<search>{GOOD}</search>", f"I do not know.{EOS}", f"<answer>{GOLD}</answer>"]]))(
        [QUESTION], trainer_stub(byte_tokenizer))
    assert [a["action"] for a in out["factutil"][0]["actions"]] == ["search", "invalid"]
    assert out["factutil"][0]["answer"] is None


def test_a_search_that_finds_nothing_carries_no_observation(byte_tokenizer):
    class Down:
        def search(self, query):
            return SimpleNamespace(observation="Search failed: the retriever is unreachable.",
                                   error="unreachable", seconds=0.0, ok=False)

    out = SearchR1Rollout(Down(), generate=Scripts(byte_tokenizer, [[
        f"<search>{GOOD}</search>", f"<answer>{GOLD}</answer>{EOS}"]]))(
        [QUESTION], trainer_stub(byte_tokenizer))
    payload = out["factutil"][0]
    assert payload["actions"][0].get("observation") is None
    assert payload["retrieval_errors"] == 1
    assert block("Search failed: the retriever is unreachable.") in byte_tokenizer.decode(
        out["completion_ids"][0])


def test_bad_options_are_refused_naming_them():
    for name in ("max_turns", "max_action_tokens", "search_threads"):
        with pytest.raises(ValueError, match=name):
            SearchR1Rollout(None, **{name: 0})


def test_trainer_credits_the_searches_that_retrieved_the_successful_rollouts_passages(
    byte_tokenizer, retrieval_url, tmp_path
):
    """Two rollouts search the right query and answer right, two search elsewhere and answer
    wrong. With facts="retrieved" each search's credit is the core's for the same text and
    passages (the reference is built from the decoded turns, not from the payload), positive on
    the good searches and negative on the others, and lands on the search's tokens only."""
    from datasets import Dataset


    tok = byte_tokenizer
    scripts = [[f"<search>{GOOD}</search>", f"<answer>{GOLD}</answer>{EOS}"]] * 2 + \
              [[f"<search>{BAD}</search>", f"<answer>Paris</answer>{EOS}"]] * 2
    config = {"mode": "exact", "facts": "retrieved", "omega": 0.5}
    seen: dict[str, Any] = {}

    Recording = recording_trainer(seen)

    trainer = Recording(
        model=tiny_model(tok, 0),
        reward_funcs=[factagent_reward],
        args=grpo_args(tmp_path, per_device_train_batch_size=4, max_steps=1,
                       mask_truncated_completions=True),  # answered episodes are not truncated
        train_dataset=Dataset.from_list([{"prompt": QUESTION, "golden_answers": [GOLD]}] * 4),
        processing_class=tok,
        rollout_func=SearchR1Rollout(client(retrieval_url), generate=Scripts(tok, scripts)),
        factutil_config=config,
    )
    trainer.train()
    rows, output = seen["rows"], seen["output"]
    completions = output["completion_ids"]
    lines, spans = [], []
    for i, row in enumerate(rows):
        ids = completions[i].tolist()
        turns = row["factutil"]["spans"]
        search_text = tok.decode(ids[turns[0][0]:turns[0][1]], skip_special_tokens=True)
        query = GOOD if GOOD in search_text else BAD
        lines.append({"uid": "q", "question": QUESTION, "golden_answers": [GOLD],
                      "rollout_id": f"r{i}", "actions": [
                          {"raw": search_text,
                           "observation": client(retrieval_url).search(query).observation},
                          {"raw": tok.decode(ids[turns[1][0]:turns[1][1]],
                                             skip_special_tokens=True)}]})
        spans.append(turns)
    reference = compute_process_advantages(lines, FactUtilConfig(**config))
    process = reference.per_rollout("process_advantage")
    good = [i for i, line in enumerate(lines) if GOOD in line["actions"][0]["raw"]]
    assert len(good) == 2
    for i in range(len(rows)):
        search_credit = process[("q", f"r{i}")][0]
        assert (search_credit > 0) if i in good else (search_credit < 0)
        mask = output["completion_mask"][i] * output["tool_mask"][i]
        assert int(mask.sum()) == sum(end - start for start, end in spans[i])  # the model's tokens
        want = np.full(completions.shape[1], float(seen["trl"][i]), dtype=np.float32)
        for (start, end), value in zip(spans[i], process[("q", f"r{i}")]):
            for t in range(start, end):
                if mask[t]:
                    want[t] = np.float32(seen["trl"][i]) + np.float32(0.5 * value)
        np.testing.assert_allclose(output["advantages"][i].numpy(), want, rtol=1e-6, atol=1e-7)
    assert torch.isfinite(output["advantages"]).all()


def test_an_episode_that_ends_by_its_protocol_is_no_truncated_completion_for_trl(
    byte_tokenizer, retrieval_url
):
    """TRL calls a completion truncated when its last token is no end of turn (nor pad), and
    ``mask_truncated_completions`` drops it from the loss. A turn cut at ``</answer>`` ends no
    turn, so an episode ended by an answer or by the turn limit closes with the end-of-turn token,
    outside the loss (``env_mask`` 0, no span); one cut by the completion budget stays open."""
    tok = byte_tokenizer
    eos = tok.eos_token_id
    for turns, max_turns in (([f"<search>{GOOD}</search>", f"<answer>{GOLD}</answer>"], 8),
                             ([f"<search>{GOOD}</search>"] * 2, 2)):
        out = SearchR1Rollout(client(retrieval_url), max_turns=max_turns,
                              generate=Scripts(tok, [turns]))([QUESTION], trainer_stub(tok))
        completion, mask = out["completion_ids"][0], out["env_mask"][0]
        assert completion[-1] == eos and mask[-1] == 0
        assert completion.count(eos) == 1 and out["factutil"][0]["spans"][-1][1] == len(completion) - 1
    turn = f"<search>{GOOD}</search>"
    out = SearchR1Rollout(client(retrieval_url), generate=Scripts(tok, [[turn] * 3]))(
        [QUESTION], trainer_stub(tok, limit=len(tok.encode(turn)) + 5))
    assert len(out["completion_ids"][0]) == len(tok.encode(turn)) + 5
    assert eos not in out["completion_ids"][0]


def test_a_search_block_cut_by_the_completion_budget_credits_only_the_passages_shown(
    byte_tokenizer, retrieval_url
):
    """The model saw the block up to ``max_completion_length``: the search's observation is that
    part (a cut passage is no fact, docs/method.md §9), none when no passage text shows."""
    from factutil.search_r1 import split_passages

    tok = byte_tokenizer
    wide = RetrievalClient(retrieval_url, topk=2, max_observation_chars=3000)
    full = wide.search(GOOD).observation
    first, second = split_passages(full).passages
    turn = f"<search>{GOOD}</search>"
    shown = f"\n\n<information>{full[: full.index(second.title) + 40]}"  # into the second
    for visible, want in ((shown, [first]), ("\n\n<inform", [])):
        limit = len(tok.encode(turn + visible))
        out = SearchR1Rollout(wide, generate=Scripts(tok, [[turn, f"<answer>{GOLD}</answer>"]]))(
            [QUESTION], trainer_stub(tok, limit=limit))
        assert tok.decode(out["completion_ids"][0]) == turn + visible
        observation = out["factutil"][0]["actions"][0].get("observation")
        assert (split_passages(observation).passages if observation else []) == want


def test_a_group_whose_spans_run_past_its_completion_keeps_trls_advantages(
    byte_tokenizer, retrieval_url, tmp_path, caplog
):
    """A rollout_func that counts spans over prompt + completion (a payload that does not fit its
    row) would put each action's credit on other tokens, or clip it away: the group keeps TRL's
    advantages, with the metric and one warning; the other group is scored."""
    import logging

    from datasets import Dataset


    tok = byte_tokenizer
    other = "Who was the director of the film Polish-Russian War?"
    scripts = ([[f"<search>{GOOD}</search>", f"<answer>{GOLD}</answer>"]] * 2
               + [[f"<search>{BAD}</search>", "<answer>Paris</answer>"]] * 2) * 2
    inner = SearchR1Rollout(client(retrieval_url), generate=Scripts(tok, scripts))

    def shifted(prompts, trainer):
        out = inner(prompts, trainer)
        for prompt, ids, payload in zip(prompts, out["prompt_ids"], out["factutil"]):
            if prompt == other:  # counted over the prompt too: the search's span falls on
                # the retrieved block, the answer's past the completion
                payload["spans"] = [[s + len(ids), e + len(ids)] for s, e in payload["spans"]]
        return out

    seen: dict[str, Any] = {}

    Recording = recording_trainer(seen)

    trainer = Recording(
        model=tiny_model(tok, 0), reward_funcs=[factagent_reward],
        args=grpo_args(tmp_path, per_device_train_batch_size=8, max_steps=1),
        train_dataset=Dataset.from_list([{"prompt": q, "golden_answers": [GOLD]}
                                         for q in (QUESTION, other)]),
        processing_class=tok, rollout_func=shifted,
        factutil_config={"mode": "exact", "facts": "retrieved", "omega": 0.5},
    )
    with caplog.at_level(logging.WARNING, logger="factutil_trl"):
        trainer.train()
    advantages, trl = seen["output"]["advantages"], seen["trl"]
    for i, row in enumerate(seen["rows"]):
        kept = torch.equal(advantages[i], trl[i].expand(advantages.shape[1]))
        assert kept == (row["prompt"] == other)
    entry = next(e for e in trainer.state.log_history if "loss" in e)
    assert entry["factutil/groups_fallback"] == 1.0 and entry["factutil/groups_scored"] == 1.0
    warnings = [r.getMessage() for r in caplog.records if r.name == "factutil_trl"]
    assert len(warnings) == 1 and "span" in warnings[0]


def test_misfit_names_a_span_past_the_completion_or_on_environment_tokens_only():
    from factutil_trl.trainer import _misfit

    env = np.array([1, 1, 1, 0, 0, 0, 1, 1])  # the model wrote tokens 0-2 and 6-7
    assert _misfit([[0, 3], [6, 8]], 8, env) is None
    assert _misfit([[0, 3], [3, 3]], 8, env) is None  # an empty span holds nothing to misplace
    assert "ends past its 8-token completion" in _misfit([[0, 3], [6, 9]], 8, env)
    assert "[3, 6) holds no token the model wrote" in _misfit([[0, 3], [3, 6]], 8, env)
    assert _misfit([[0, 3], [3, 6]], 8, None) is None  # no env_mask: nothing to check against
    assert _misfit([[0, 30]], 0, None) is None  # a row out of the loss is not checked


def test_a_groups_credit_does_not_depend_on_the_groups_that_share_its_batch(
    byte_tokenizer, retrieval_url, tmp_path
):
    """The same question with the same episodes, alone in its batch and then beside another
    group: each of its completions gets the same tokens and the same Ω·A_proc on them."""
    from datasets import Dataset

    from factutil_trl import FactUtilGRPOTrainer

    tok = byte_tokenizer
    other = "Who is the mother of the director of film Polish-Russian War?"
    scripts = {
        QUESTION: [[f"<search>{GOOD}</search>", f"<answer>{GOLD}</answer>"]] * 2
        + [[f"<search>{BAD}</search>", "<answer>Paris</answer>"]] * 2,
        other: [[f"<search>{BAD}</search>", f"<answer>{GOLD}</answer>"],
                [f"<search>{GOOD}</search>", "<answer>Paris</answer>"]] * 2,
    }

    def by_question(trainer, contexts, budget):
        out: list[Any] = [None] * len(contexts)
        for question, generate in policies.items():
            rows = [k for k, c in enumerate(contexts) if question in tok.decode(c)]
            for k, ids in zip(rows, generate(trainer, [contexts[k] for k in rows], budget)):
                out[k] = ids
        return out

    def credit(questions: list[str]) -> dict[str, list[float]]:
        """Per completion text of QUESTION: its tokens' advantage minus TRL's."""
        seen: dict[str, Any] = {}

        class Recording(FactUtilGRPOTrainer):
            def _add_process_advantages(self, inputs, output):
                trl = output["advantages"].clone()
                super()._add_process_advantages(inputs, output)
                seen.update(rows=[dict(r) for r in inputs], output=dict(output), trl=trl)

        Recording(
            model=tiny_model(tok, 0), reward_funcs=[factagent_reward],
            args=grpo_args(tmp_path / str(len(questions)), max_steps=1,
                           per_device_train_batch_size=4 * len(questions)),
            train_dataset=Dataset.from_list([{"prompt": q, "golden_answers": [GOLD]}
                                             for q in questions]),
            processing_class=tok, rollout_func=SearchR1Rollout(client(retrieval_url),
                                                               generate=by_question),
            factutil_config={"mode": "exact", "facts": "retrieved", "omega": 0.5,
                             "process_norm": "group"},  # normalised: where a batch could leak in
        ).train()
        output, found = seen["output"], {}
        for i, row in enumerate(seen["rows"]):
            if row["prompt"] == QUESTION:
                n = int(output["completion_mask"][i].sum())
                text = tok.decode(output["completion_ids"][i, :n].tolist())
                found[text] = (output["advantages"][i, :n] - seen["trl"][i]).tolist()
        return found

    policies = {q: Scripts(tok, s) for q, s in scripts.items()}
    alone = credit([QUESTION])
    policies = {q: Scripts(tok, s) for q, s in scripts.items()}
    shared = credit([other, QUESTION])
    assert len(alone) == 2 and alone == shared
    assert any(abs(value) > 0.01 for values in alone.values() for value in values)
