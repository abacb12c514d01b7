"""A small retrieval service with Search-R1's HTTP API, and a client for it (docs/method.md §1 ``search``).

The agent's ``search`` action needs a retriever. Search-R1 (and the verl / OpenRLHF recipes built
on it) talk to one over HTTP::

    POST /retrieve   {"queries": ["..."], "topk": 3, "return_scores": true}

and read ``{"result": [...]}``, one list per query, in one of two shapes:

- ``return_scores`` true:  ``[[{"document": DOC, "score": float}, ...], ...]``
- ``return_scores`` false: ``[[DOC, ...], ...]``

where ``DOC`` is ``{"id": str, "contents": "\\"Title\\"\\ntext"}`` (Search-R1's wiki-18 form: the
title, quoted, on the first line of ``contents``). This module serves that API with BM25 (``bm25s``,
English stopwords, no stemming, over ``title + " " + text``) over a JSON or JSONL corpus, bound to
127.0.0.1 by default; the 2Wiki paragraphs shipped with the package
(:data:`DEFAULT_CORPUS`, 6,119 paragraphs, 3 MB) are the default corpus. Start it with one
command::

    factutil serve [--corpus FILE] [--port 8000] [--topk 3] [--request-timeout 10]

Requests are bounded: a body over :data:`MAX_REQUEST_BYTES` gets 413, more than
:data:`MAX_QUERIES` queries or a ``topk`` over :data:`MAX_TOPK` get 422, ``queries`` must be a list
of strings (422 otherwise, as Search-R1's FastAPI server answers), a body that is not JSON gets 400
and one without a ``Content-Length`` 411; a client silent for ``request_timeout_s`` (headers or
body half sent) gets 408 and its connection is closed. Searches take a lock one query at a time, so
a large request never holds the others back for long. ``benchmarks/serve_load.py`` measures it
under load.

The client side (:class:`RetrievalClient`, :func:`parse_reply`, :func:`format_observation`) reads
both reply shapes and turns every failure (timeout, HTTP error, bad JSON) into an observation that
says so, never an exception: a retriever hiccup must not crash a rollout.

Only the standard library is imported here; ``bm25s`` is imported when an index is built, so
``import factutil`` stays light. Nothing here reads the environment.
"""

from __future__ import annotations

import json
import logging
import math
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

logger = logging.getLogger("factutil.retrieval")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_TOPK = 3
MAX_TOPK = 100
MAX_QUERIES = 1024
MAX_REQUEST_BYTES = 1 << 20
DEFAULT_REQUEST_TIMEOUT_S = 10.0
_DRAIN_BYTES = 64 << 20  # an oversized body is read and dropped up to this, so the 413 arrives
DEFAULT_CORPUS = Path(__file__).resolve().parent / "data" / "hipporag_2wikimultihopqa_corpus.json"
"""The 2Wiki paragraphs shipped as package data (HippoRAG's 2wikimultihopqa corpus, MIT; the
repository's ``examples/data`` links to the same file)."""


@dataclass(frozen=True, slots=True)
class Document:
    """One retrievable paragraph: ``id``, ``title`` and ``text`` (all ``str``)."""

    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        """Search-R1's ``contents`` field: the title in double quotes, a newline, the text."""
        return f'"{self.title}"\n{self.text}'

    def to_reply(self) -> dict[str, str]:
        """The ``DOC`` object of a reply: Search-R1's ``id`` and ``contents``, plus ``title``/``text``."""
        return {"id": self.id, "contents": self.contents, "title": self.title, "text": self.text}


@dataclass(frozen=True, slots=True)
class Passage:
    """One retrieved passage as a client reads it; ``score`` is None when the reply had none."""

    title: str
    text: str
    score: float | None = None


def _document_from(item: Any, index: int, where: str) -> Document:
    if not isinstance(item, Mapping):
        # A malformed corpus line is a data error like the others (ValueError), not a caller's bug.
        raise ValueError(  # noqa: TRY004
            f"{where}: expected an object with title/text or contents, got {type(item).__name__}"
        )
    doc_id = str(item.get("id", item.get("_id", index)))
    if isinstance(item.get("text"), str) and ("title" in item or "contents" not in item):
        return Document(doc_id, str(item.get("title", "")), item["text"])
    contents = item.get("contents")
    if isinstance(contents, str):
        title, text = split_contents(contents)
        return Document(doc_id, title, text)
    raise ValueError(f"{where}: a document needs a string 'text' (with 'title') or 'contents'")


def load_corpus(path: str | Path) -> list[Document]:
    """Read a corpus: a JSON array of documents, or JSONL with one document per line.

    A document is ``{"title", "text"}`` (the bundled 2Wiki file, HippoRAG's form) or
    ``{"id", "contents"}`` (Search-R1's wiki-18 form, the title on the first line). ``id`` (or
    ``_id``) is optional and defaults to the 0-based position.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file is empty or a document is malformed (``FILE:LINE`` or ``FILE[i]``).
    """
    path = Path(path)
    raw = path.read_text(encoding="utf-8")
    stripped = raw.lstrip()
    documents: list[Document] = []
    if stripped.startswith("["):
        try:
            items = json.loads(raw)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not valid JSON: {error}") from None
        for index, item in enumerate(items):
            documents.append(_document_from(item, index, f"{path}[{index}]"))
    else:
        for line_no, line in enumerate(raw.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{line_no}: not valid JSON: {error}") from None
            documents.append(_document_from(item, len(documents), f"{path}:{line_no}"))
    if not documents:
        raise ValueError(f"{path}: the corpus holds no document")
    return documents


class BM25Retriever:
    """BM25 over ``title + " " + text`` of each document (``bm25s`` defaults, English stopwords).

    Deterministic: the same corpus and query give the same documents in the same order.
    Thread-safe for concurrent :meth:`search` calls (a lock guards the index).

    Args:
        documents: the corpus, at least one document.

    Raises:
        ImportError: ``bm25s`` is not installed (``pip install bm25s``).
        ValueError: no document.
    """

    def __init__(self, documents: Sequence[Document]):
        if not documents:
            raise ValueError("BM25Retriever needs at least one document")
        try:
            import bm25s
            from bm25s.tokenization import Tokenizer
        except ImportError as error:  # pragma: no cover - depends on the environment
            raise ImportError("the retrieval server needs bm25s: pip install bm25s") from error
        self.documents = list(documents)
        self._tokenizer = Tokenizer(stopwords="en")
        texts = [f"{doc.title} {doc.text}" for doc in self.documents]
        ids = self._tokenizer.tokenize(
            texts, update_vocab=True, return_as="ids", show_progress=False
        )
        self._bm25 = bm25s.BM25()
        self._bm25.index(ids, show_progress=False)
        self._lock = threading.Lock()

    def search(self, queries: Sequence[str], topk: int) -> list[list[tuple[Document, float]]]:
        """The top ``min(topk, len(corpus))`` documents of each query with their BM25 scores.

        Args:
            queries: Q query strings.
            topk: k >= 1.

        Returns:
            Q lists of ``(document, score)``, best first; a query with no known word still gets k
            documents, all scored 0.
        """
        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        k = min(topk, len(self.documents))
        results: list[list[tuple[Document, float]]] = []
        for query in queries:
            # One query per turn of the lock: a large request does not hold the others back.
            with self._lock:
                ids = self._tokenizer.tokenize(
                    [query], update_vocab=False, return_as="ids", show_progress=False
                )
                hits, scores = self._bm25.retrieve(ids, k=k, show_progress=False)
            results.append(
                [(self.documents[int(i)], float(s)) for i, s in zip(hits[0], scores[0])]
            )
        return results


class RetrieveRequest(BaseModel):
    """The body of ``POST /retrieve`` (Search-R1's ``QueryRequest``); unknown keys are ignored.

    ``queries`` is a list of at most :data:`MAX_QUERIES` strings (a bare string is refused, as by
    Search-R1's server: it is a client bug, not one query); ``topk`` at most :data:`MAX_TOPK`.
    """

    model_config = ConfigDict(extra="ignore")

    queries: list[str] = Field(max_length=MAX_QUERIES)
    topk: int | None = Field(None, ge=1, le=MAX_TOPK)
    return_scores: bool = False


def retrieve_reply(
    retriever: BM25Retriever, request: RetrieveRequest, default_topk: int = DEFAULT_TOPK
) -> dict[str, Any]:
    """The JSON reply to one request, in the shape ``request.return_scores`` selects.

    Returns:
        ``{"result": [[{"document": DOC, "score": s}, ...], ...]}`` with scores, or
        ``{"result": [[DOC, ...], ...]}`` without (see the module docstring).
    """
    topk = request.topk or default_topk
    result: list[list[Any]] = []
    for hits in retriever.search(request.queries, topk):
        if request.return_scores:
            result.append([{"document": doc.to_reply(), "score": score} for doc, score in hits])
        else:
            result.append([doc.to_reply() for doc, _ in hits])
    return {"result": result}


class _RequestRefused(Exception):
    """Internal: a request answered with a 4xx; ``close`` when its body was not read."""

    def __init__(self, status: int, message: str, close: bool = False):
        super().__init__(message)
        self.status, self.message, self.close = status, message, close


def _handler(
    retriever: BM25Retriever, default_topk: int, request_timeout_s: float
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "factutil-retrieval/1"
        protocol_version = "HTTP/1.1"
        timeout = request_timeout_s  # every read of the connection: a stalled client times out
        # Headers and body go out as two writes: without TCP_NODELAY the body waits for the
        # client's delayed ACK of the headers, ~40 ms per request.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("%s %s", self.address_string(), format % args)

        def _send(self, status: int, payload: Mapping[str, Any], allow: str | None = None) -> None:
            body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
            self.send_response(status)
            if allow is not None:  # 405 must say which methods the path takes (RFC 9110)
                self.send_header("Allow", allow)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/health", ""):
                self._send(200, {"status": "ok", "documents": len(retriever.documents)})
            elif self.path.rstrip("/") == "/retrieve":
                self._send(405, {"error": "/retrieve takes POST with a JSON body"}, allow="POST")
            else:
                self._send(404, {"error": f"no such path {self.path!r}; use POST /retrieve"})

        def do_POST(self) -> None:
            try:
                body = self._body()
                if self.path.rstrip("/") != "/retrieve":
                    raise _RequestRefused(404, f"no such path {self.path!r}; use POST /retrieve")
                request = _parsed_request(body)
            except _RequestRefused as refused:
                if refused.close:
                    self.close_connection = True
                self._send(refused.status, {"error": refused.message})
                return
            except TimeoutError:
                self.close_connection = True
                self._send(408, {"error": f"the request was not received within "
                                          f"{request_timeout_s:g} s"})
                return
            try:
                reply = retrieve_reply(retriever, request, default_topk)
            except Exception:  # a bug here, not the client's: say so and keep serving
                logger.exception("retrieval failed for %r", request.queries[:3])
                self._send(500, {"error": "the retriever failed; see the server log"})
                return
            self._send(200, reply)

        def _body(self) -> bytes:
            """The request body, read in full; raises _RequestRefused for bad framing or size."""
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                raise _RequestRefused(411, "give the body with a Content-Length (no chunked "
                                           "transfer encoding)", close=True)
            given = (self.headers.get("Content-Length") or "0").strip()
            if not given.isdigit():
                raise _RequestRefused(
                    400, f"Content-Length must be a non-negative integer, got {given!r}",
                    close=True)
            length = int(given)
            if length > MAX_REQUEST_BYTES:
                self._drain(length)
                raise _RequestRefused(413, f"request body over {MAX_REQUEST_BYTES} bytes",
                                      close=True)
            return self.rfile.read(length)

        def _drain(self, length: int) -> None:
            # Read (and drop) an oversized body before answering, so the client, still sending,
            # gets the 413 and not a reset; past _DRAIN_BYTES or a stall, just close.
            left = min(length, _DRAIN_BYTES)
            try:
                while left > 0:
                    chunk = self.rfile.read(min(left, 1 << 16))
                    if not chunk:
                        break
                    left -= len(chunk)
            except TimeoutError:
                pass

    return Handler


def _parsed_request(body: bytes) -> RetrieveRequest:
    """A request body as a :class:`RetrieveRequest`; raises _RequestRefused with 400 or 422."""
    try:
        payload = json.loads(body or b"null")
    except json.JSONDecodeError as error:
        raise _RequestRefused(400, f"body is not JSON: {error}") from None
    except RecursionError:
        raise _RequestRefused(400, "body is not JSON: nested too deeply") from None
    except ValueError as error:  # not UTF-8, UTF-16 or UTF-32
        raise _RequestRefused(400, f"body is not JSON: {error}") from None
    try:
        return RetrieveRequest.model_validate(payload)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in item['loc']) or 'body'}: {item['msg']}"
            for item in error.errors(include_url=False)
        )
        raise _RequestRefused(422, problems) from None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the listen backlog: 64 clients connecting at once are all queued


def make_server(
    retriever: BM25Retriever,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    default_topk: int = DEFAULT_TOPK,
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
) -> ThreadingHTTPServer:
    """An HTTP server for ``retriever`` (not started: call ``serve_forever``, e.g. in a thread).

    One thread per connection (keep-alive); the limits and answers to bad requests are in the
    module docstring.

    Args:
        host: the address to bind; 127.0.0.1 by default (this machine only).
        port: TCP port; 0 picks a free one (read it from ``server.server_address[1]``).
        default_topk: k when a request gives none (Search-R1's ``--topk``).
        request_timeout_s: seconds a connection may stay silent (while sending a request, or
            idle between requests) before the server answers 408 or closes it; > 0.

    Raises:
        OSError: the port is taken.
        ValueError: default_topk < 1 or request_timeout_s <= 0.
    """
    if default_topk < 1:
        raise ValueError(f"default_topk must be >= 1, got {default_topk}")
    if not request_timeout_s > 0:
        raise ValueError(f"request_timeout_s must be > 0, got {request_timeout_s}")
    return _Server((host, port), _handler(retriever, default_topk, request_timeout_s))


def serve(
    corpus: str | Path | None = None,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    topk: int = DEFAULT_TOPK,
    announce: Callable[[str], None] = print,
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
) -> None:
    """Load ``corpus`` (default: the bundled 2Wiki paragraphs), index it and serve until interrupted.

    ``announce`` receives one line, ``listening on http://HOST:PORT/retrieve (N documents)``, once
    the socket is bound (so a caller that passed port 0 learns the port).
    """
    path = Path(corpus) if corpus is not None else DEFAULT_CORPUS
    if not path.exists():
        raise FileNotFoundError(
            f"corpus {path} not found; pass --corpus FILE (JSON array or JSONL of title/text)"
        )
    started = time.perf_counter()
    retriever = BM25Retriever(load_corpus(path))
    server = make_server(
        retriever, host=host, port=port, default_topk=topk, request_timeout_s=request_timeout_s
    )
    bound_host, bound_port = server.server_address[:2]
    announce(
        f"listening on http://{bound_host}:{bound_port}/retrieve ({len(retriever.documents)} "
        f"documents from {path}, indexed in {time.perf_counter() - started:.1f} s)"
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


# ----------------------------------------------------------------------------- client side


def split_contents(contents: str) -> tuple[str, str]:
    """Search-R1 ``contents`` -> ``(title, text)``: the first line, unquoted, and the rest."""
    title, _, text = contents.partition("\n")
    title = title.strip()
    if len(title) >= 2 and title[0] == title[-1] == '"':
        title = title[1:-1]
    return title, text.strip()


def _passage(item: Any) -> Passage:
    score: float | None = None
    doc = item
    if isinstance(item, Mapping) and "document" in item:
        doc = item["document"]
        raw_score = item.get("score")
        if isinstance(raw_score, (int, float)) and not isinstance(raw_score, bool):
            score = float(raw_score) if math.isfinite(raw_score) else None
    if isinstance(doc, str):
        title, text = split_contents(doc)
        return Passage(title, text, score)
    if not isinstance(doc, Mapping):
        # A malformed reply is the retriever's fault: parse_reply reports it as ValueError.
        raise ValueError(f"a retrieved document must be an object, got {type(doc).__name__}")  # noqa: TRY004
    if isinstance(doc.get("contents"), str):
        title, text = split_contents(doc["contents"])
        return Passage(str(doc.get("title") or title), str(doc.get("text") or text), score)
    if isinstance(doc.get("text"), str):
        return Passage(str(doc.get("title", "")), doc["text"], score)
    raise ValueError("a retrieved document has neither 'contents' nor 'text'")


def parse_reply(payload: Any) -> list[list[Passage]]:
    """Read a ``/retrieve`` reply in either Search-R1 shape (with or without scores).

    Args:
        payload: the decoded JSON, ``{"result": [[...], ...]}``.

    Returns:
        One list of :class:`Passage` per query, in reply order.

    Raises:
        ValueError: the payload has neither shape (the message says what was found).
    """
    if not isinstance(payload, Mapping) or "result" not in payload:
        found = sorted(payload) if isinstance(payload, Mapping) else type(payload).__name__
        raise ValueError(f"reply has no 'result' (got {found})")
    result = payload["result"]
    if not isinstance(result, list) or not all(isinstance(hits, list) for hits in result):
        raise ValueError("reply 'result' must be a list of lists, one per query")
    return [[_passage(item) for item in hits] for hits in result]


def format_observation(passages: Iterable[Passage]) -> str:
    """Passages as one observation: ``Doc i (Title: ...) text`` lines, i from 1.

    The form of the bundled sample rollouts (Search-R1 writes ``Doc i(Title: ...)``); an empty
    list gives ``"No documents found."``.
    """
    lines = [
        f"Doc {rank} (Title: {passage.title}) {passage.text}"
        for rank, passage in enumerate(passages, start=1)
    ]
    return "\n".join(lines) if lines else "No documents found."


@dataclass(frozen=True, slots=True)
class SearchResult:
    """What one search gave: the observation text, the error (None when it worked), seconds taken."""

    observation: str
    error: str | None
    seconds: float

    @property
    def ok(self) -> bool:
        """True when the retriever answered with passages."""
        return self.error is None


class RetrievalClient:
    """A blocking client of a Search-R1 ``/retrieve`` endpoint that never raises on a failed search.

    Args:
        url: the endpoint, e.g. ``http://127.0.0.1:8000/retrieve``.
        topk: passages per query (>= 1).
        timeout_s: seconds per HTTP attempt (> 0).
        retries: extra attempts after a timeout, connection error or HTTP 5xx (>= 0); a 4xx or a
            malformed reply is not retried.
        return_scores: ask for the scored reply shape (both shapes are read either way).
        max_observation_chars: the observation is cut to this many characters (None: no cut).
    """

    def __init__(
        self,
        url: str,
        topk: int = DEFAULT_TOPK,
        timeout_s: float = 10.0,
        retries: int = 1,
        return_scores: bool = True,
        max_observation_chars: int | None = None,
    ):
        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.url = url
        self.topk = topk
        self.timeout_s = timeout_s
        self.retries = retries
        self.return_scores = return_scores
        self.max_observation_chars = max_observation_chars

    def search(self, query: str) -> SearchResult:
        """Retrieve for one query. Failures come back as an observation, with ``error`` set:

        ``"Search failed: the retriever timed out after 10.0 s."``, ``"Search failed: HTTP 500
        from the retriever."``, ``"Search failed: the retriever is unreachable (...)."``,
        ``"Search failed: malformed reply (...)."``.
        """
        started = time.perf_counter()
        body = json.dumps(
            {"queries": [query], "topk": self.topk, "return_scores": self.return_scores}
        ).encode("utf-8")
        error = "no attempt made"
        for _attempt in range(self.retries + 1):
            request = urllib.request.Request(
                self.url, data=body, headers={"Content-Type": "application/json"}, method="POST"
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    payload = json.loads(response.read().decode("utf-8"))
            except urllib.error.HTTPError as http_error:
                error = f"HTTP {http_error.code} from the retriever"
                if http_error.code < 500:
                    break
                continue
            except TimeoutError:
                error = f"the retriever timed out after {self.timeout_s:g} s"
                continue
            except urllib.error.URLError as url_error:
                if isinstance(url_error.reason, (TimeoutError, socket.timeout)):
                    error = f"the retriever timed out after {self.timeout_s:g} s"
                else:
                    error = f"the retriever is unreachable ({url_error.reason})"
                continue
            except (OSError, ValueError) as other:  # connection reset, bad JSON
                error = f"malformed reply ({other})"
                continue
            try:
                hits = parse_reply(payload)
                if len(hits) != 1:
                    raise ValueError(f"expected results for 1 query, got {len(hits)}")
            except ValueError as bad:
                error = f"malformed reply ({bad})"
                break
            observation = format_observation(hits[0])
            if self.max_observation_chars is not None:
                observation = observation[: self.max_observation_chars]
            return SearchResult(observation, None, time.perf_counter() - started)
        logger.warning("search %r failed: %s", query, error)
        return SearchResult(f"Search failed: {error}.", error, time.perf_counter() - started)
