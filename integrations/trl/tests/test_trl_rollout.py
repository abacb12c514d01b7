"""FactAgentRollout and factagent_reward without a trainer: the byte tokenizer (text round-trips
exactly), scripted actions, and the real BM25 retriever over the bundled corpus on 127.0.0.1."""

from __future__ import annotations

import socket
from types import SimpleNamespace
from typing import Any

import pytest
from factutil.tools.agent import build_messages
from factutil.tools.retrieval import RetrievalClient

from factutil_trl import FactAgentRollout, factagent_reward, question_of
from factutil_trl.rollout import left_pad

QUESTION = "Who is the mother of the director of film Polish-Russian War (Film)?"
GOLD = "Małgorzata Braunek"
SEARCH = '{"action": "search", "query": "Polish-Russian War director"}'
ASSERT = '{"action": "assert", "facts": [["Polish-Russian War", "director", "Xawery Żuławski"]]}'
PROSE = "Let me think about it."
ANSWER = '{"action": "answer", "answer": "Xawery Żuławski"}'


class Script:
    """``generate``: every context gets the next text of one script (then the end of turn)."""

    def __init__(self, tokenizer: Any, texts: list[str]):
        self.tokenizer = tokenizer
        self.texts = list(texts)
        self.budgets: list[int] = []

    def __call__(self, trainer, contexts, max_new_tokens):
        self.budgets.append(max_new_tokens)
        out = []
        for _ in contexts:
            text = self.texts.pop(0)
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            out.append((ids + [self.tokenizer.eos_token_id])[:max_new_tokens])
        return out


def trainer(tokenizer: Any, limit: int | None = 4096) -> SimpleNamespace:
    """What the rollout reads of a GRPOTrainer."""
    return SimpleNamespace(
        processing_class=tokenizer,
        eos_token_ids=[tokenizer.eos_token_id],
        max_completion_length=limit,
    )


def roll(tokenizer, url, texts, prompts=(QUESTION,), limit=4096, **options):
    script = Script(tokenizer, texts)
    options.setdefault("max_action_tokens", 256)  # bytes: every scripted action fits
    rollout = FactAgentRollout(
        RetrievalClient(url, topk=1, max_observation_chars=200),
        generate=script,
        instructions="Act.",
        **options,
    )
    return rollout(list(prompts), trainer(tokenizer, limit)), script


def test_one_episode_tokens_mask_spans_and_payload(byte_tokenizer, retrieval_url):
    tok = byte_tokenizer
    out, _ = roll(tok, retrieval_url, [SEARCH, ASSERT, PROSE, ANSWER])
    assert set(out) == {"prompt_ids", "completion_ids", "logprobs", "env_mask", "factutil"}
    assert out["logprobs"] is None
    prompt = tok.decode(out["prompt_ids"][0])
    assert prompt == tok.apply_chat_template(
        build_messages(QUESTION, [], None, "Act."), add_generation_prompt=True, tokenize=False
    )
    completion, mask = out["completion_ids"][0], out["env_mask"][0]
    payload = out["factutil"][0]
    assert len(completion) == len(mask)
    spans = payload["spans"]
    assert len(spans) == 4
    for (start, end), text in zip(spans, [SEARCH, ASSERT, PROSE, ANSWER]):
        assert tok.decode(completion[start:end]) == text + "<|im_end|>"
    model_tokens = {t for start, end in spans for t in range(start, end)}
    assert [i for i, m in enumerate(mask) if m] == sorted(model_tokens)

    observation = RetrievalClient(retrieval_url, topk=1, max_observation_chars=200).search(
        "Polish-Russian War director"
    )
    replies = [tok.decode(completion[spans[k][1] : spans[k + 1][0]]) for k in range(3)]
    assert replies[0] == (
        f"\n<|im_start|>user\nSearch result:\n{observation.observation}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert "Fact store:\n- Polish-Russian War | director | Xawery Żuławski<|im_end|>" in replies[1]
    assert "Invalid action (no action found). Reply with one JSON action." in replies[2]
    assert spans[-1][1] == len(completion)  # nothing after the answer

    assert payload["question"] == QUESTION
    assert [a["action"] for a in payload["actions"]] == ["search", "assert", "invalid", "answer"]
    assert payload["actions"][0]["observation"] == observation.observation
    assert payload["actions"][1]["triples"] == [
        {"subject": "Polish-Russian War", "relation": "director", "object": "Xawery Żuławski"}
    ]
    assert payload["answer"] == "Xawery Żuławski" and payload["store_size"] == 1
    assert payload["retrieval_errors"] == 0


def test_episodes_of_a_batch_take_their_own_turns(byte_tokenizer, retrieval_url):
    # two episodes: turn 1 gives both an action, then only the one still running continues
    out, script = roll(
        byte_tokenizer,
        retrieval_url,
        [ANSWER, SEARCH, ANSWER],
        prompts=[QUESTION, [{"role": "user", "content": "Who directed it?"}]],
    )
    first, second = out["factutil"]
    assert [a["action"] for a in first["actions"]] == ["answer"]
    assert first["store_size"] == 0
    assert [a["action"] for a in second["actions"]] == ["search", "answer"]
    assert second["question"] == "Who directed it?"
    assert script.texts == []


def test_max_turns_without_an_answer_ends_on_the_last_action(byte_tokenizer, retrieval_url):
    out, _ = roll(byte_tokenizer, retrieval_url, [SEARCH, SEARCH], max_turns=2)
    payload = out["factutil"][0]
    assert [a["action"] for a in payload["actions"]] == ["search", "search"]
    assert payload["answer"] is None and payload["store_size"] is None
    assert payload["spans"][-1][1] == len(out["completion_ids"][0])


def test_an_action_cut_at_max_action_tokens_is_closed_before_the_reply(
    byte_tokenizer, retrieval_url
):
    out, script = roll(
        byte_tokenizer, retrieval_url, [SEARCH, "<answer>X</answer>"], max_action_tokens=20
    )
    payload = out["factutil"][0]
    completion = out["completion_ids"][0]
    start, end = payload["spans"][0]
    assert end - start == 20 and script.budgets == [20, 20]
    assert payload["actions"][0]["action"] == "invalid"  # the cut JSON does not parse
    assert completion[end] == byte_tokenizer.eos_token_id and out["env_mask"][0][end] == 0


def test_the_completion_never_exceeds_max_completion_length(byte_tokenizer, retrieval_url):
    out, script = roll(byte_tokenizer, retrieval_url, [SEARCH, SEARCH, SEARCH], limit=120)
    completion = out["completion_ids"][0]
    assert len(completion) <= 120
    # the first action fits; the search reply does not leave room for another action
    assert len(out["factutil"][0]["actions"]) == 1 and len(script.texts) == 2
    # the model never saw that reply: under facts="retrieved" its passages are none of the rollout's
    assert out["factutil"][0]["actions"][0]["observation"] is None


def test_a_failed_search_is_fed_back_as_its_observation(byte_tokenizer):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    script = Script(byte_tokenizer, [SEARCH, ANSWER])
    rollout = FactAgentRollout(
        RetrievalClient(f"http://127.0.0.1:{closed}/retrieve", retries=0), generate=script
    )
    out = rollout([QUESTION], trainer(byte_tokenizer))
    payload = out["factutil"][0]
    assert payload["retrieval_errors"] == 1
    assert payload["actions"][0]["observation"].startswith(
        "Search failed: the retriever is unreachable"
    )
    assert "Search result:\nSearch failed" in byte_tokenizer.decode(out["completion_ids"][0])


def test_bad_options_are_refused_naming_them():
    with pytest.raises(ValueError, match="max_action_tokens must be an int >= 1, got 0"):
        FactAgentRollout(None, max_action_tokens=0)
    with pytest.raises(ValueError, match="max_turns"):
        FactAgentRollout(None, max_turns=0)


def test_question_of_prompts():
    assert question_of("Q?") == "Q?"
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "old"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "Q?"},
    ]
    assert question_of(messages) == "Q?"
    with pytest.raises(ValueError, match="user message"):
        question_of([{"role": "system", "content": "s"}])
    typed = [{"role": "user", "content": [{"type": "image"},
                                          {"type": "text", "text": "Who directed"},
                                          {"type": "text", "text": "Jaws?"}]}]
    assert question_of(typed) == "Who directed\nJaws?"
    with pytest.raises(ValueError, match="user message"):
        question_of([{"role": "user", "content": [{"type": "image"}]}])


def test_factagent_reward_is_the_answers_f1_and_zero_from_an_empty_store():
    payloads = [
        {"answer": "Xawery Żuławski", "store_size": 1},
        {"answer": "Xawery", "store_size": 2},  # P = 1, R = 1/2: F1 = 2/3
        {"answer": "Xawery Żuławski", "store_size": 0},
        {"answer": None, "store_size": None},
        None,
    ]
    golds = [["Xawery Żuławski"]] * 5
    rewards = factagent_reward(completions=[""] * 5, factutil=payloads, golden_answers=golds)
    assert rewards[0] == 1.0 and rewards[1] == pytest.approx(2 / 3)
    assert rewards[2:] == [0.0, 0.0, None]


def test_factagent_reward_names_a_bad_gold_answer():
    with pytest.raises(ValueError, match=r"golden_answers\[1\]"):
        factagent_reward(
            completions=["", ""],
            factutil=[{"answer": "a", "store_size": 1}] * 2,
            golden_answers=[["a"], []],
        )
    with pytest.raises(ValueError, match="gold answers dataset column, one of"):
        factagent_reward(completions=[""], factutil=[{"answer": "a", "store_size": 1}])
    with pytest.raises(ValueError, match=r"answer\[0\]"):  # the column it read is named
        factagent_reward(completions=[""], factutil=[{"answer": "a", "store_size": 1}],
                         answer=[" "])


def test_factagent_reward_reads_the_gold_answers_of_another_column():
    """A dataset whose gold answers are in ``answer`` (HotpotQA, NQ) or ``target`` (Search-R1)
    is scored as under ``golden_answers``: F1 1, 2/3 and 0 by hand; ``golden_answers`` first."""
    payloads = [{"answer": "Xawery Żuławski", "store_size": 1},
                {"answer": "Xawery", "store_size": 1}, {"answer": "Paris", "store_size": 1}]
    golds = ["Xawery Żuławski", "Xawery Żuławski", "Rome"]
    for column in ("answer", "target", "answers"):
        rewards = factagent_reward(completions=[""] * 3, factutil=payloads, **{column: golds})
        assert rewards[0] == 1.0 and rewards[1] == pytest.approx(2 / 3) and rewards[2] == 0.0
    first = factagent_reward(completions=[""] * 3, factutil=payloads, answer=["Paris"] * 3,
                             golden_answers=golds)
    assert first[2] == 0.0 and first[0] == 1.0


def test_factagent_reward_takes_each_rows_first_gold_that_is_not_none():
    """A dataset merged from two sources: ``golden_answers`` None on some rows, ``answer`` there.
    Each row reads its own first gold column that holds a value, as the trainer does: F1 by hand
    (1; 1/2: "Paris" against "Paris France"; 0 against "Rome")."""
    payloads = [{"answer": "Paris", "store_size": 1}] * 3
    rewards = factagent_reward(completions=[""] * 3, factutil=payloads,
                               golden_answers=[["Paris"], None, None],
                               answer=["Rome", "Paris France", "Rome"])
    assert rewards == [1.0, pytest.approx(2 * 0.5 * 1 / 1.5), 0.0]


def test_left_pad_by_hand():
    """Shorter rows get the pad id in front and a 0 mask there; 1 on each row's own tokens."""
    input_ids, attention = left_pad([[5, 6, 7], [9]], pad=0)
    assert input_ids.tolist() == [[5, 6, 7], [0, 0, 9]]
    assert attention.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_an_episode_ended_by_an_answer_or_max_turns_closes_its_cut_turn(
    byte_tokenizer, retrieval_url
):
    """TRL takes a completion whose last token is no end of turn for one cut by
    max_completion_length (mask_truncated_completions drops it): a last turn cut at
    max_action_tokens is closed as every earlier one is, with env_mask 0."""
    tok = byte_tokenizer
    rambling = ANSWER + " and that is all I know about it."
    budget = len(tok.encode(ANSWER, add_special_tokens=False)) + 6
    for texts, options, kind in (([rambling], {"max_action_tokens": budget}, "answer"),
                                 ([SEARCH], {"max_action_tokens": 20, "max_turns": 1}, "invalid")):
        out, _ = roll(tok, retrieval_url, texts, **options)
        assert [a["action"] for a in out["factutil"][0]["actions"]] == [kind]
        completion, mask = out["completion_ids"][0], out["env_mask"][0]
        start, end = out["factutil"][0]["spans"][-1]
        assert end - start == options["max_action_tokens"] and tok.eos_token_id not in completion[:end]
        assert completion[end:] == [tok.eos_token_id] and mask[end:] == [0]
