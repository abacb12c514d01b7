"""Search-R1's turn protocol, shared by every adapter's Search-R1-style rollout (docs/method.md §9).

The model writes ``<search>query</search>`` or ``<answer>…</answer>``; generation stops at
:data:`STOP`; the retrieved passages follow in ``<information>`` (:func:`information`); a turn that
does neither gets :data:`INVALID`. A search carries its observation only when it retrieved a
passage (:func:`with_observation`), so ``facts="retrieved"`` never reads an error as a passage.
"""

from __future__ import annotations

import re
from typing import Any

from factutil.tools.retrieval import SearchResult, format_observation

STOP = ("</search>", "</answer>")
INVALID = (
    "My previous action is invalid. If I want to search, I should put the query between "
    "<search> and </search>. If I want to give the final answer, I should put the answer between "
    "<answer> and </answer>. Let me try again."
)
NOTHING_FOUND = format_observation([])
_INFORMATION = re.compile(r"<information>(.*?)</information>", re.DOTALL)


def information(text: str) -> str:
    """``text`` as the block that follows a turn: ``\\n\\n<information>text</information>\\n\\n``."""
    return f"\n\n<information>{text}</information>\n\n"


def observation_of(feedback: str) -> str | None:
    """The text inside the first ``<information>`` block of ``feedback``, stripped; None when
    there is none or it holds :data:`NOTHING_FOUND`."""
    found = _INFORMATION.search(feedback or "")
    text = found.group(1).strip() if found else ""
    return text if text and text != NOTHING_FOUND else None


def with_observation(action: Any, result: SearchResult) -> Any:
    """The search ``action`` with ``result``'s passages as its observation; unchanged when the
    search failed or found nothing (it retrieved no passage)."""
    if result.ok and result.observation != NOTHING_FOUND:
        return action.model_copy(update={"observation": result.observation})
    return action
