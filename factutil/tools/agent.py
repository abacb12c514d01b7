"""The two agents every trainer adapter rolls out, as environments a binding feeds one model turn
at a time (the binding owns tokens, generation and masks; the rules are here, once):
:class:`SearchR1Episode`, Search-R1's protocol (docs/method.md §9, :mod:`factutil.search_r1`), and
:class:`FactAgentEpisode`, the FactAgent (docs/method.md §1), whose prompt is the question, the fact
store and the latest search result, never the history; the store holds each triple once per
normalised text (docs/method.md §2.1)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, Protocol

from factutil.actions import AssertAction, InvalidAction, SearchAction, Triple
from factutil.facts import DEFAULT_TEMPLATE, triple_text
from factutil.parse import parse_action
from factutil.search_r1 import NO_PASSAGES, episode_ends, feedback
from factutil.tools.retrieval import SearchResult

__all__ = ["EMPTY_STORE", "INSTRUCTIONS", "NO_OBSERVATION", "FactAgentEpisode", "Retriever",
           "SearchR1Episode", "Turn", "add_to_store", "build_messages", "render_store"]


class Retriever(Protocol):
    """What an episode searches with: :class:`factutil.tools.retrieval.RetrievalClient`."""

    def search(self, query: str) -> SearchResult: ...


class Turn(NamedTuple):
    """One turn read: its parsed ``action`` (a search carries its observation), the environment's
    ``feedback`` text ("" once the episode ends), whether the episode is ``done``, and the
    search's ``result`` (None when the turn did not search)."""

    action: Any
    feedback: str
    done: bool
    result: SearchResult | None


class SearchR1Episode:
    """One Search-R1 episode: each turn is parsed (:func:`factutil.parse.parse_action`), a search
    asks ``retriever`` (an observation only when it retrieved a passage, so ``facts="retrieved"``
    never reads an error as one), and :func:`factutil.search_r1.episode_ends` and
    :func:`factutil.search_r1.feedback` say what follows."""

    def __init__(self, retriever: Retriever, max_turns: int):
        self.retriever = retriever
        self.max_turns = max_turns
        self.actions: list[Any] = []
        self.done = False

    def step(self, text: str) -> Turn:
        """Read one model turn (blocks while it searches)."""
        action, result = parse_action(text), None
        if isinstance(action, SearchAction):
            result = self.retriever.search(action.query)
            if self._keeps(result):
                action = action.model_copy(update={"observation": result.observation})
        self._apply(action)
        self.actions.append(action)
        self.done = episode_ends(action.action, len(self.actions), self.max_turns)
        return Turn(action, "" if self.done else self._reply(action, result), self.done, result)

    def _keeps(self, result: SearchResult) -> bool:
        return result.ok and not NO_PASSAGES.match(result.observation)

    def _apply(self, action: Any) -> None:
        pass

    def _reply(self, action: Any, result: SearchResult | None) -> str:
        return feedback(action.action, result and result.observation)


INSTRUCTIONS = """\
You answer a question by acting one step at a time. You keep a fact store: the facts you have \
taken from search results. Each turn you see only the question, your fact store and the latest \
search result. Reply with exactly one action, as one JSON object:
{"action": "search", "query": "<what to look up>"}
{"action": "assert", "facts": [["<subject>", "<relation>", "<object>"], ...]}
{"action": "answer", "answer": "<short answer>"}
Use assert to copy the facts you need from the latest search result into your store before you \
search again: the next search result replaces it. Answer from the facts in your store, with as \
few words as possible."""

EMPTY_STORE = "(empty)"
NO_OBSERVATION = "(none yet)"


def add_to_store(store: list[Triple], triples: Iterable[Triple], template: str = DEFAULT_TEMPLATE
                 ) -> int:
    """Append to ``store`` (in place) the triples of one valid ``assert`` whose normalised text
    (docs/method.md §2.1, ``template``: the ``triple_template``) it lacks; returns how many."""
    before = len(store)
    seen = {triple_text(triple, template) for triple in store}
    for triple in triples:
        text = triple_text(triple, template)
        if text not in seen:
            seen.add(text)
            store.append(triple)
    return len(store) - before


def render_store(store: Sequence[Triple]) -> str:
    """The store as lines ``- subject | relation | object``, in insertion order; ``(empty)``."""
    if not store:
        return EMPTY_STORE
    return "\n".join(f"- {t.subject} | {t.relation} | {t.object}" for t in store)


def build_messages(question: str, store: Sequence[Triple], observation: str | None,
                   instructions: str = INSTRUCTIONS) -> list[dict[str, str]]:
    """Chat messages of one turn: ``[{"role": "system", "content": instructions}, {"role":
    "user", "content": "Question: ...\\n\\nFact store:\\n...\\n\\nLatest search result:\\n..."}]``.
    """
    user = (
        f"Question: {question}\n\n"
        f"Fact store:\n{render_store(store)}\n\n"
        f"Latest search result:\n{observation if observation else NO_OBSERVATION}"
    )
    return [{"role": "system", "content": instructions}, {"role": "user", "content": user}]


class FactAgentEpisode(SearchR1Episode):
    """One FactAgent episode over :class:`SearchR1Episode`'s turn: a search's observation (a
    failure's message too) becomes the latest result, an assert adds its triples to the store
    (``template``: the config's ``triple_template``); the feedback is the reply for an agent whose
    context grows (the search result, the store, or why the action failed)."""

    def __init__(self, question: str, retriever: Retriever, max_turns: int,
                 template: str = DEFAULT_TEMPLATE):
        super().__init__(retriever, max_turns)
        self.question = question
        self.template = template
        self.store: list[Triple] = []
        self.observation: str | None = None

    def messages(self, instructions: str = INSTRUCTIONS) -> list[dict[str, str]]:
        """The next turn's prompt (:func:`build_messages`)."""
        return build_messages(self.question, self.store, self.observation, instructions)

    def _keeps(self, result: SearchResult) -> bool:
        return True

    def _apply(self, action: Any) -> None:
        if isinstance(action, SearchAction):
            self.observation = action.observation
        elif isinstance(action, AssertAction):
            add_to_store(self.store, action.triples, self.template)

    def _reply(self, action: Any, result: SearchResult | None) -> str:
        if isinstance(action, SearchAction):
            return f"Search result:\n{action.observation}"
        if isinstance(action, AssertAction):
            return f"Fact store:\n{render_store(self.store)}"
        reason = action.reason if isinstance(action, InvalidAction) else "unexpected action"
        return f"Invalid action ({reason}). Reply with one JSON action."
