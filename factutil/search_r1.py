"""Search-R1's turn protocol and the layouts of retrieved text (docs/method.md §9), the one
implementation behind the ``response`` input form, ``facts="retrieved"`` and every adapter's
Search-R1-style rollout: what a turn is (:func:`split_turns`), what follows it (:func:`feedback`),
when an episode ends (:func:`episode_ends`) and how a retrieved block holds passages
(:func:`split_passages`). Pure text: ``re`` and ``json`` only.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

STOP = ("</search>", "</answer>")
"""Search-R1's stop strings: a turn ends at the first (kept in the turn)."""
INVALID = (
    "My previous action is invalid. If I want to search, I should put the query between "
    "<search> and </search>. If I want to give the final answer, I should put the answer between "
    "<answer> and </answer>. Let me try again."
)
"""Search-R1's feedback to a turn that neither searches nor answers."""
NO_PASSAGES = re.compile(r"\s*(?:No documents found\.|Search failed:)")
"""What factutil's retrieval client writes when a search retrieved no passage."""
BLOCKS = {
    "search_r1": ("<information>", "</information>"),
    "r1_searcher": ("<|begin_of_documents|>", "<|end_of_documents|>"),
    "autorefine": ("<documents>", "</documents>"),
    "research": ("<result>", "</result>"),
    "tool_response": ("<tool_response>", "</tool_response>"),
}
"""The retrieved block's tags by layout (Search-R1's first); every one is read."""
HEADERS = {
    # Doc 1(Title: "A") text | Doc 1 (Title: A)\ntext | Doc 1(docid: D, Title: T) text | Doc 1: text.
    # A title ends at the first ")" before a space or the line's end: "Paris (film)" stays whole.
    "doc": r"Doc[ \t]*(?P<rank>\d+)[ \t]*(?:\((?:docid:[ \t]*(?P<id>[^,)\n]*?)[ \t]*,[ \t]*)?"
           r"Title:[ \t]*(?P<title>[^\n]*?)\)(?=\s|$)|:)",
    # [1] text | 1. text | 1) text | (1)text (R1-Searcher)
    "numbered": r"(?:\[(?P<rank>\d{1,3})\]|(?P<rank2>\d{1,3})[.)](?=[ \t])|\((?P<rank3>\d{1,3})\))",
}
"""Passage headers by layout, tried in this order at the start of a line; the passages of a
block are the texts between headers numbered one after another."""
TRUNCATED = "...(truncated)..."
"""What verl's tool writes where it cut the middle out of a long result."""

_HEADERS = [re.compile(rf"^[ \t]*{pattern}[ \t]*", re.MULTILINE) for pattern in HEADERS.values()]
_OPEN = re.compile("|".join(re.escape(tags[0]) for tags in BLOCKS.values()))
_CLOSE = {tags[0]: tags[1] for tags in BLOCKS.values()}
_NOTICE = re.compile(r"My previous action is invalid\..{0,400}?Let me try again\.", re.DOTALL)
_TURN_END = re.compile(r"</(?:search|assert|answer)\s*>", re.IGNORECASE)
_TURN_START = re.compile(r"<(?:think|search|assert|answer)\s*>", re.IGNORECASE)
_SEPARATOR = re.compile(r"\n[ \t]*-{3,}[ \t]*\n")
_BLANK = re.compile(r"\n[ \t]*\n")
_VERL_RESULT = re.compile(r'\s*\{\s*"result"\s*:\s*"')
_JSON = re.compile(r"\s*(?:\{|\[\s*[\[{])")
_CUT_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\(?:u[0-9a-fA-F]{0,3})?$")


class Passage(NamedTuple):
    """One retrieved passage: its id (``""`` when the input gives none), title and text."""

    id: str
    title: str
    text: str


class Passages(NamedTuple):
    """The passages of one observation; ``unsplit``: no layout split it (one passage then);
    ``cut``: passages dropped because the text was cut inside them; ``empty``: passages dropped
    because they hold no visible character."""

    passages: list[Passage]
    unsplit: bool = False
    cut: int = 0
    empty: int = 0


def information(text: str) -> str:
    """``text`` as the block that follows a search: ``\\n\\n<information>text</information>\\n\\n``."""
    return f"\n\n<information>{text.strip()}</information>\n\n"


def feedback(action: str, observation: str | None = None) -> str:
    """The environment's text after a turn whose action is ``action`` (``"search"``, ...): the
    search's ``observation`` as :func:`information`, else Search-R1's :data:`INVALID` notice."""
    return information(observation or "") if action == "search" else f"\n{INVALID}\n"


def episode_ends(action: str, turns: int, max_turns: int) -> bool:
    """Search-R1's rule: an episode ends on an answer or after ``max_turns`` turns; any other turn
    (a search, no tag, a cut turn) gets :func:`feedback` and the episode goes on."""
    return action == "answer" or turns >= max_turns


def split_turns(response: str) -> list[tuple[str, str | None]]:
    """A whole Search-R1 response (the model's text only, never the prompt) as its turns, each
    ``(text, observation)``: a turn ends at a closing ``</search>``, ``</assert>`` or
    ``</answer>`` or where the environment's text starts; the observation is the retrieved block
    that follows it (any layout of :data:`BLOCKS`; a block never closed runs to the next turn's
    opening tag and keeps its opening tag, so :func:`split_passages` knows it was cut), None when
    none does. Search-R1's :data:`INVALID` notice, bare or in a block, is no observation;
    whitespace between turns and text before the first turn are the environment's."""
    turns: list[list[Any]] = []
    at = 0
    while at < len(response):
        block, notice = _OPEN.search(response, at), _NOTICE.search(response, at)
        start = min((m.start() for m in (block, notice) if m), default=len(response))
        _add_turns(turns, response[at:start])
        if start == len(response):
            break
        if block is not None and block.start() == start:
            tag = block.group()
            close = response.find(_CLOSE[tag], block.end())
            if close >= 0:
                end, content = close + len(_CLOSE[tag]), response[block.end():close]
            else:
                after = [m.start() for m in (_TURN_START.search(response, block.end()),
                                             _OPEN.search(response, block.end()),
                                             _NOTICE.search(response, block.end())) if m]
                end = min(after, default=len(response))
                content = tag + response[block.end():end]
            if turns and not _NOTICE.fullmatch(content.strip()):
                turns[-1][1] = content if turns[-1][1] is None else f"{turns[-1][1]}\n---\n{content}"
        else:
            end = notice.end()
        at = end
    return [(text, observation) for text, observation in turns]


def _add_turns(turns: list[list[Any]], text: str) -> None:
    """Append the turns of a stretch of model text (one per closing action tag, and the rest)."""
    start = 0
    for end in [m.end() for m in _TURN_END.finditer(text)] + [len(text)]:
        if text[start:end].strip():
            turns.append([text[start:end], None])
        start = end


def split_passages(observation: str) -> Passages:
    """The passages of a search's observation (docs/method.md §9).

    Read, in order: the block's wrapper (any tag pair of :data:`BLOCKS`; an opening tag with no
    closing one means the text was cut); JSON, Search-R1's retrieval-server reply
    (``{"result": [[{"document": {"id", "contents"}, "score"}]]}``: ids kept) or verl's search tool
    (``{"result": "<text>"}``, also cut in the middle at :data:`TRUNCATED`); then the text, whose
    parts between ``---`` lines (one per query) are split at the passage headers of
    :data:`HEADERS`, else at blank lines. A passage the text was cut inside is dropped (``cut``), as
    is one with no visible character (``empty``); a text no layout splits is one passage
    (``unsplit``); factutil's "No documents found." and "Search failed: ..." are no passage.
    """
    text = observation.strip()
    whole = True
    opened = _OPEN.match(text)
    if opened:
        text, whole = text[opened.end():], False
        if text.rstrip().endswith(_CLOSE[opened.group()]):
            text, whole = text.rstrip()[: -len(_CLOSE[opened.group()])], True
    else:
        closing = next((close for close in _CLOSE.values() if text.endswith(close)), "")
        text = text[: len(text) - len(closing)]
    if NO_PASSAGES.match(text) or not text.strip():
        return Passages([])
    found = _json_passages(text.strip()) if _JSON.match(text) else None
    if found is not None:
        return _kept(*found, whole)
    passages, headed = _text_passages(text)
    return _kept(passages, 0, whole, unsplit=not headed and len(passages) == 1)


def _kept(passages: list[Passage], cut: int, whole: bool, unsplit: bool = False) -> Passages:
    if not whole and passages:  # the block was cut: its last passage is not whole
        passages, cut = passages[:-1], cut + 1
    visible = [p for p in passages if _visible(p.title) or _visible(p.text)]
    return Passages(visible, unsplit and bool(visible), cut, len(passages) - len(visible))


def _visible(text: str) -> bool:
    return any(char.isprintable() and not char.isspace() for char in text)


def _text_passages(text: str) -> tuple[list[Passage], bool]:
    """The passages of a text, and whether passage headers (else blank lines) split it."""
    passages: list[Passage] = []
    headed = False
    for part in _SEPARATOR.split(text):
        found = _headed(part)
        headed = headed or found is not None
        passages += found if found is not None else [
            Passage("", "", piece.strip()) for piece in _BLANK.split(part) if piece.strip()]
    return passages, headed


def _from_header(text: str) -> str:
    """``text`` from its first passage header at a line's start ("" when none)."""
    starts = [m.start() for pattern in _HEADERS for m in [pattern.search(text)] if m]
    return text[min(starts):] if starts else ""


def _headed(text: str) -> list[Passage] | None:
    """The passages of a text that starts with a header of :data:`HEADERS`, numbered one after
    another (a header out of sequence is text); None when none starts it."""
    for pattern in _HEADERS:
        heads = []
        for match in pattern.finditer(text):
            rank = int(next(v for k, v in match.groupdict().items() if k.startswith("rank") and v))
            if not heads and text[: match.start()].strip():
                break
            if not heads or rank == heads[-1][1] + 1:
                heads.append((match, rank))
        if not heads:
            continue
        passages = []
        for k, (match, _) in enumerate(heads):
            end = heads[k + 1][0].start() if k + 1 < len(heads) else len(text)
            body = text[match.end():end].strip()
            title = (match.groupdict().get("title") or "").strip().strip('"').strip()
            if not title and re.match(r'"[^"\n]*"[ \t]*\n', body):  # Doc 1: "Title"\ntext
                title, body = split_contents(body)
            passages.append(Passage((match.groupdict().get("id") or "").strip(), title, body))
        return passages
    return None


def split_contents(contents: str) -> tuple[str, str]:
    """Search-R1 ``contents`` -> ``(title, text)``: the first line, unquoted, and the rest."""
    title, _, text = contents.partition("\n")
    title = title.strip()
    if len(title) >= 2 and title[0] == title[-1] == '"':
        title = title[1:-1]
    return title, text.strip()


def document_passage(item: Any) -> Passage:
    """One hit of a retrieval-server reply (``{"document": DOC, "score": s}`` or DOC itself; DOC
    has ``contents`` or ``text`` and optional ``id`` and ``title``) as a :class:`Passage`.

    Raises:
        ValueError: the hit is neither a text nor such an object.
    """
    doc = item.get("document", item) if isinstance(item, dict) else item
    if isinstance(doc, str):
        return Passage("", *split_contents(doc))
    if not isinstance(doc, dict):
        raise ValueError(f"a retrieved document must be an object, got {type(doc).__name__}")  # noqa: TRY004
    identity = "" if doc.get("id") is None else str(doc["id"])
    if not isinstance(doc.get("contents"), str) and not isinstance(doc.get("text"), str):
        raise ValueError("a retrieved document has neither 'contents' nor 'text'")  # noqa: TRY004
    title, text = split_contents(doc.get("contents") or "")
    return Passage(identity, str(doc.get("title") or title).strip(),
                   str(text if doc.get("text") is None else doc["text"]).strip())


def _json_passages(text: str) -> tuple[list[Passage], int] | None:
    """The passages of a JSON observation and how many were cut; None when it is no JSON layout."""
    if _VERL_RESULT.match(text):  # verl's search tool: the text is a JSON string
        body = text[_VERL_RESULT.match(text).end():]
        closed = re.search(r'"\s*}\s*$', body)
        body = body[: closed.start()] if closed else body
        head, cut_mark, tail = body.partition(TRUNCATED)
        passages, _ = _text_passages(_unescape(head))
        if not cut_mark:  # whole, or cut at its end
            return (passages, 0) if closed else (passages[:-1], int(bool(passages)))
        # the middle cut out: the head's last passage and the tail's first text are its two ends
        later, _ = _text_passages(_from_header(_unescape(tail)))
        return passages[:-1] + (later if closed else later[:-1]), 1 + (not closed and bool(later))
    try:
        value = json.loads(text)
    except ValueError:
        return _complete_documents(text)
    value = value.get("result", value) if isinstance(value, dict) else value
    if isinstance(value, str):
        return _text_passages(value)[0], 0
    hits = value if isinstance(value, list) else []
    hits = [hit for group in hits for hit in (group if isinstance(group, list) else [group])]
    try:
        return [document_passage(hit) for hit in hits], 0
    except ValueError:
        return None


def _complete_documents(text: str) -> tuple[list[Passage], int] | None:
    """The whole documents of a retrieval-server reply cut short: each object that decodes and
    holds ``contents`` or ``text``; the one cut counts."""
    decoder = json.JSONDecoder(strict=False)
    found: list[Passage] = []
    at, cut = text.find("{", 1), 0
    while at >= 0:
        try:
            value, end = decoder.raw_decode(text, at)
        except ValueError:
            cut, end = 1, at + 1
        else:
            doc = value.get("document", value) if isinstance(value, dict) else None
            if isinstance(doc, dict) and ("contents" in doc or "text" in doc):
                found.append(document_passage(value))
                cut = 0
            else:
                end = at + 1
        at = text.find("{", end)
    return (found, cut) if found or cut else None


def _unescape(piece: str) -> str:
    """A piece of a JSON string's body as text (an escape the cut split is dropped)."""
    piece = _CUT_ESCAPE.sub("", piece)
    try:
        return json.loads(f'"{piece}"', strict=False)
    except ValueError:
        return piece
