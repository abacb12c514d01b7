"""The FactAgent's prompt and fact store (docs/method.md §1), shared by every trainer adapter:
the prompt is the question, the store and the latest search result, never the history; the
store holds each triple once per normalised text (docs/method.md §2.1)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from factutil.actions import Triple
from factutil.facts import triple_text

__all__ = ["EMPTY_STORE", "INSTRUCTIONS", "NO_OBSERVATION", "add_to_store", "build_messages",
           "render_store"]

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


def add_to_store(store: list[Triple], triples: Iterable[Triple], template: str) -> int:
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
