"""Search-R1's turn protocol and the layouts of retrieved text (docs/method.md §9): the one
implementation behind the ``response`` input form, ``facts="retrieved"`` and every adapter's
Search-R1-style rollout (:mod:`factutil.tools.agent`). Pure text: ``re`` and ``json`` only."""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Literal, NamedTuple

STOP = ("</search>", "</answer>")
"""Search-R1's stop strings: a turn ends at the first (kept in the turn)."""
INVALID = (
    "My previous action is invalid. If I want to search, I should put the query between "
    "<search> and </search>. If I want to give the final answer, I should put the answer between "
    "<answer> and </answer>. Let me try again."
)
"""Search-R1's feedback to a turn that neither searches nor answers."""
NO_PASSAGES = re.compile(r"\s*(?:No documents found\.|Search failed:|No search results found\.|Search error:|"
                         r"Search request failed|Error processing search results:|Unknown API state|Error: )")
"""What factutil's retrieval client and verl's search tool write when a search retrieved no passage."""
HEADERS = {
    # Doc 1(Title: "A") text | Doc 1 (Title: A)\ntext | Doc 1(docid: D, Title: T) text | Doc 1: text;
    # a title ends at the first ")" before a space or the line's end outside its own (...) pairs,
    # else at its closing quote
    "doc": r"Doc[ \t]*(?P<rank>\d+)[ \t]*(?:\((?:docid:[ \t]*(?P<id>[^,)\n]*?)[ \t]*,[ \t]*)?"
           r"Title:[ \t]*(?P<title>(?:[^()\n]|\([^()\n]*\))*?|\"[^\n]*?\"|[^\n]*?)\)(?=\s|$)|:)",
    # [1] text | 1. text | 1) text | (1)text (R1-Searcher)
    "numbered": r"(?:\[(?P<rank>\d{1,3})\]|(?P<rank2>\d{1,3})[.)](?=[ \t])|\((?P<rank3>\d{1,3})\))",
}
"""Passage headers, tried at a line's start: a block's passages are the texts after headers
numbered one after another (a header out of sequence is text)."""


LAYOUTS = {  # name: (the block's opening tag, its closing tag, its passages' header of HEADERS)
    "search_r1": ("<information>", "</information>", "doc"),
    "r1_searcher": ("<|begin_of_documents|>", "<|end_of_documents|>", "numbered"),
    "autorefine": ("<documents>", "</documents>", "doc"),
    "research": ("<result>", "</result>", "doc"),
    "tool_response": ("<tool_response>", "</tool_response>", "doc"),
}
"""The layouts read, by the name ``FactUtilConfig.layouts`` gives (every one by default; Search-R1's
is the one :func:`information` writes)."""
ALL = tuple(LAYOUTS)
LayoutName = Literal[ALL]  # type: ignore[valid-type]
TRUNCATED = "...(truncated)..."
"""What verl's search tool writes where it cut the middle out of a long result."""
_NOTICE = r"My previous action is invalid\..{0,400}?Let me try again\."


class _Rules(NamedTuple):
    headers: list[re.Pattern[str]]
    close: dict[str, str]
    open: re.Pattern[str]
    env: re.Pattern[str]


@functools.cache
def _rules(layouts: tuple[str, ...]) -> _Rules:
    """The patterns of the named layouts (headers in :data:`HEADERS` order)."""
    close = {LAYOUTS[name][0]: LAYOUTS[name][1] for name in layouts}
    names = {LAYOUTS[name][2] for name in layouts}
    opening = "(?:" + "|".join(re.escape(tag) for tag in close) + ")"
    env = re.compile(  # a block's body, a cut block (tag and text to the next turn), the notice
        rf"{opening}(?P<body>(?:(?!{opening}).)*?)(?:{'|'.join(map(re.escape, close.values()))})|"
        rf"(?P<cut>{opening}.*?)(?=(?i:<(?:think|search|assert|answer|tool_call|\|begin_of_query\|)\s*>)|{opening}|\Z)"
        rf"|{_NOTICE}", re.DOTALL)
    return _Rules([re.compile(rf"^[ \t]*{pattern}[ \t]*", re.MULTILINE)
                   for name, pattern in HEADERS.items() if name in names], close, re.compile(opening), env)


# a prompt through a chat template (after padding or <bos>; or its role names alone, decoded
# without special tokens), and the header its first assistant turn starts after
_CHAT = re.compile(r"(?:\s|<bos>|<pad>|<\|endoftext\|>)*(?:<\|im_start\|>|<\|begin_of_text\|>|"
                   r"<\|start_header_id\|>|<start_of_turn>|(?:system|user)\n)")
_ASSISTANT = re.compile(r"<\|im_start\|>assistant\n?|<\|start_header_id\|>assistant<\|end_header_id\|>\n*|"
                        r"<start_of_turn>model\n?|(?<=\n)(?:assistant|model)\n+")
_TURN_END = re.compile(r"</(?:search|assert|answer|tool_call)\s*>|<\|end_of_query\|>", re.IGNORECASE)
_ENDING = re.compile(rf"(?:{_TURN_END.pattern})\Z", re.IGNORECASE)
# chat-template text between turns (role markers, end and pad tokens; with or without the special tokens)
_TEMPLATE = re.compile(r"(?:\s|<\|(?:im_start|im_end|eot_id|endoftext|(?:begin|end)_of_text|start_header_id|"
                       r"end_header_id)\|>|<(?:start|end)_of_turn>|</s>|<(?:eos|pad)>|\b(?:system|user|assistant|tool|model)\b)*")
_VERL = re.compile(r'\{\s*"result"\s*:\s*"(.*?)(?:("\s*}\s*)|\Z)', re.DOTALL)
_PARTIAL_DOC = re.compile(r"\n[ \t]*D(?:o(?:c(?:[ \t]*\d+(?:[ \t]*\([^\n)]*)?)?)?)?[ \t]*\Z")
_BARE_QUOTE = re.compile(r'(?<!\\)((?:\\\\)*)"')  # a quote whose backslash a cut took: text
_CUT_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\(?:u[0-9a-fA-F]{0,3})?$")
_R1_TITLE = re.compile(r'"?Title:[ \t]*(.*?)[ \t]+Text:[ \t]*|([^\n]*?\S)[ \t]{3,}')  # R1-Searcher's


class Passage(NamedTuple):
    """One retrieved passage: its id (``""`` when the input gives none), title and text."""

    id: str
    title: str
    text: str


class Passages(NamedTuple):
    """The passages of one observation; ``unsplit``: no layout split it (one passage; of several
    blocks: how many); ``cut``, ``empty``: passages dropped as cut inside, or with no visible character."""

    passages: list[Passage]
    unsplit: int = 0
    cut: int = 0
    empty: int = 0


def information(text: str) -> str:
    """``text`` as the block that follows a search: ``\\n\\n<information>text</information>\\n\\n``."""
    return f"\n\n<information>{text.strip()}</information>\n\n"


def feedback(action: str, observation: str | None = None) -> str:
    """The environment's text after a turn of kind ``action`` that does not end the episode: a
    search's ``observation`` as :func:`information`, else Search-R1's :data:`INVALID` notice."""
    return information(observation or "") if action == "search" else f"\n{INVALID}\n"


def episode_ends(action: str, turns: int, max_turns: int) -> bool:
    """Search-R1's rule: an episode ends on an answer or at ``max_turns`` turns; any other turn (a
    search, no tag, a cut turn) gets :func:`feedback` and the episode goes on."""
    return action == "answer" or turns >= max_turns


def split_turns(response: str) -> list[tuple[str, str | None]]:
    """A whole Search-R1 response (the model's text, never the prompt; a text that starts with the
    prompt through a chat template is read from the first assistant header) as its turns ``(text,
    observation)``: a turn ends at a closing ``</search>``, ``</assert>``, ``</answer>``,
    ``</tool_call>`` or R1-Searcher's ``<|end_of_query|>``, or where the environment's text
    starts; chat-template text between turns is none. A retrieved block (of any layout of
    :data:`LAYOUTS`) is the observation of the first turn since the last block that ends as the
    turn before it does (parallel tool calls get one each), else None; a block never closed ends
    where the next turn opens a tag and keeps its opening tag, so :func:`split_passages` knows it
    is cut. Search-R1's :data:`INVALID` notice, bare or in a block, is no observation; whitespace
    between turns and a block before the first turn are the environment's."""
    turns: list[list[Any]] = []
    start = _ASSISTANT.search(response) if _CHAT.match(response) else None
    at = start.end() if start else 0
    free = 0  # the first turn no block has followed yet (parallel tool calls get one block each)
    for env in _rules(ALL).env.finditer(response, at):
        before = len(turns)
        _add_turns(turns, response[at:env.start()])
        free = before if len(turns) > before else free
        at, content = env.end(), env.lastgroup and env[env.lastgroup]
        if turns and content and not re.fullmatch(_NOTICE, content.strip(), re.DOTALL):
            ends = [m.group().lower() if (m := _ENDING.search(t)) else "" for t, _ in turns[free:]]
            k = free + ends.index(ends[-1]) if ends else len(turns) - 1  # the first ending as the last
            turns[k][1], free = content if turns[k][1] is None else f"{turns[k][1]}\n---\n{content}", k + 1
        else:
            free = len(turns)
    _add_turns(turns, response[at:])
    return [(text, observation) for text, observation in turns]


def _add_turns(turns: list[list[Any]], text: str) -> None:
    start = 0
    for end in [m.end() for m in _TURN_END.finditer(text)] + [len(text)]:
        if not _TEMPLATE.fullmatch(text, start, end):
            turns.append([text[start:end], None])
        start = end


def split_passages(observation: str, layouts: tuple[str, ...] = ALL) -> Passages:
    """The passages of a search's observation (docs/method.md §9): the block's tags removed (an
    opening tag with no closing one: the text was cut); JSON read as Search-R1's retrieval server
    writes it (``{"result": [[{"document": {"id", "contents"}, "score"}]]}``, ids kept; a reply cut
    short keeps its whole documents) or verl's search tool (``{"result": TEXT}``, also cut in the
    middle at :data:`TRUNCATED`); a text split at ``---`` lines (one part per query), then at the
    passage headers of the ``layouts``, else at blank lines. A passage the text was cut inside is
    dropped (``cut``), as is one with no visible character (``empty``); a text no layout splits is
    one passage (``unsplit``); factutil's "No documents found." and "Search failed: ..." hold none.
    Several blocks (parallel tool calls' replies): each as :func:`split_turns` reads it, counts summed."""
    rules = _rules(layouts)
    text = observation.strip()
    opened = rules.open.match(text)
    text = text[opened.end():] if opened else text
    closed = next((close for close in rules.close.values() if text.endswith(close)), None)
    text = text[: len(text) - len(closed)].strip() if closed else text
    envs = [*_rules(ALL).env.finditer(observation)] if "<" in text and any(
        tag in text for tag in _rules(ALL).close) else []  # a tag in a passage's text is text:
    if len(envs) > 1 and envs[0].lastgroup == "body" and _TEMPLATE.fullmatch(observation, 0, envs[0].start()):
        # blocks only where the text opens with a closed block; each block alone (one at most)
        parts = [split_passages(env[env.lastgroup], layouts) for env in envs if env.lastgroup]
        return Passages([p for part in parts for p in part.passages], *map(sum, list(zip(*parts))[1:]))
    whole = not opened or closed is not None
    partial = None if whole else _PARTIAL_DOC.search(text)  # cut inside the next passage's header
    text, whole = (text[: partial.start()], True) if partial else (text, whole)
    if not text:
        return Passages([])
    if text.startswith("(truncated)..."):  # verl's tool kept its answer's end (truncate side "right")
        text = '{"result": "' + TRUNCATED + text[14:]
    elif text.startswith('{"result"') and text.endswith("...(truncated)"):  # or its start ("left")
        text = text[:-14] + TRUNCATED + '"}'
    verl = _VERL.fullmatch(text)
    if verl:  # the text is a JSON string, perhaps cut in the middle and at its end
        head, cut_mark, tail = verl.group(1).partition(TRUNCATED)
        head = _unescape(head)
        partial = _PARTIAL_DOC.search(head) if cut_mark else None  # the cut went through a header
        passages = _text_passages(head[: partial.start()] if partial else head, rules)[0]
        if cut_mark:  # the cut passage's two ends: the head's last one, the tail's first text
            tail = _unescape(tail)
            heads = [m.start() for pattern in rules.headers for m in [pattern.search(tail)] if m]
            passages = passages[: None if partial else -1] + _text_passages(
                tail[min(heads):] if heads else "", rules)[0]
        return _kept(passages, int(bool(cut_mark)), whole and verl.group(2) is not None)
    if re.match(r"\{|\[\s*[\[{]", text):
        found = _json_passages(text, rules)
        if found is not None:
            return _kept(*found, whole)
    passages, headed = _text_passages(text, rules)
    return _kept(passages, int(bool(partial)), whole, unsplit=not headed and len(passages) == 1)


def _kept(passages: list[Passage], cut: int, whole: bool, unsplit: bool = False) -> Passages:
    if not whole and passages:  # cut at the end: its last passage is not whole
        passages, cut = passages[:-1], cut + 1
    visible = [p for p in passages if any(c.isprintable() and not c.isspace() for c in p.title + p.text)]
    return Passages(visible, unsplit and bool(visible), cut, len(passages) - len(visible))


def _text_passages(text: str, rules: _Rules) -> tuple[list[Passage], bool]:
    """The passages of a text, and whether passage headers (else blank lines) split it."""
    passages, headed = [], False
    for part in re.split(r"\n[ \t]*-{3,}[ \t]*\n", text):
        if NO_PASSAGES.match(part):  # a failed or empty search's message
            continue
        found = _headed(part, rules.headers)
        headed = headed or found is not None
        passages += found if found is not None else [
            Passage("", "", piece.strip()) for piece in re.split(r"\n[ \t]*\n", part) if piece.strip()]
    return passages, headed


def _headed(text: str, headers: list[re.Pattern[str]]) -> list[Passage] | None:
    """The passages of a text that starts with a header of :data:`HEADERS`; None when none does."""
    for pattern in headers:
        heads: list[tuple[re.Match[str], int]] = []
        for match in pattern.finditer(text):
            rank = int(next(v for k, v in match.groupdict().items() if k.startswith("rank") and v))
            if not heads and text[: match.start()].strip():
                break
            if not heads or rank == heads[-1][1] + 1:
                heads.append((match, rank))
        passages = []
        for k, (match, _) in enumerate(heads):
            body = text[match.end(): heads[k + 1][0].start() if k + 1 < len(heads) else None]
            title, body = split_contents(match.groupdict().get("title") or "")[0], body.strip()
            if not title and CONTENTS.match(body):  # Doc 1: "Title"\ntext
                title, body = split_contents(body)
            elif match.groupdict().get("rank3") and (r1 := _R1_TITLE.match(body)):  # (1)T   text
                title, body = (r1[1] if r1[1] is not None else r1[2]).strip(), body[r1.end():]
            passages.append(Passage((match.groupdict().get("id") or "").strip(), title, body))
        if passages:
            return passages
    return None


CONTENTS = re.compile(r'[ \t]*"[^\n]*"[ \t\r]*\n')  # Search-R1 contents: a quoted title line, text


def split_contents(contents: str) -> tuple[str, str]:
    """Search-R1 ``contents`` -> ``(title, text)``: the first line, unquoted, and the rest."""
    title, _, text = contents.partition("\n")
    title = title.strip()
    if len(title) >= 2 and title[0] == title[-1] == '"':
        title = title[1:-1]
    return title, text.strip()


def document_passage(item: Any) -> Passage:
    """One hit of a retrieval-server reply (``{"document": DOC, "score": s}`` or DOC, a text or an
    object with ``contents`` or ``text`` and optional ``id`` and ``title``) as a :class:`Passage`.

    Raises:
        ValueError: the hit is none of these.
    """
    doc = item.get("document", item) if isinstance(item, dict) else item
    if isinstance(doc, str):
        return Passage("", *split_contents(doc))
    if not isinstance(doc, dict) or not any(isinstance(doc.get(k), str) for k in ("contents", "text")):
        raise ValueError("a retrieved document must be an object with 'contents' or 'text'")
    title, text = split_contents(doc.get("contents") or "")
    return Passage("" if doc.get("id") is None else str(doc["id"]),
                   str(doc.get("title") or title).strip(),
                   str(text if doc.get("text") is None else doc["text"]).strip())


def _json_passages(text: str, rules: _Rules) -> tuple[list[Passage], int] | None:
    """The passages of a retrieval-server reply and how many were cut; None: no such reply."""
    try:
        value = json.loads(text)
    except ValueError:  # cut short: every document object that decodes whole
        decoder, found, cut, at = json.JSONDecoder(strict=False), [], 0, text.find("{", 1)
        while at >= 0:
            try:
                value, end = decoder.raw_decode(text, at)
                found.append(document_passage(value))
                cut = 0
            except ValueError:
                cut, end = 1, at + 1
            at = text.find("{", end)
        return (found, cut) if found or cut else None
    value = value.get("result", value) if isinstance(value, dict) else value
    if isinstance(value, str):
        return _text_passages(value, rules)[0], 0
    if not isinstance(value, list):
        return None
    hits = [hit for group in value for hit in (group if isinstance(group, list) else [group])]
    try:
        return [document_passage(hit) for hit in hits], 0
    except ValueError:
        return None


def _unescape(piece: str) -> str:
    """A piece of a JSON string's body as text (an escape the cut split is dropped)."""
    try:
        return json.loads('"' + _BARE_QUOTE.sub(r'\1\\"', _CUT_ESCAPE.sub(r"\1", piece)) + '"', strict=False)
    except ValueError:
        return piece
