"""The BM25 index and Search-R1's ``POST /retrieve`` HTTP server over it (``factutil serve``).

The API, the reply shapes and the limits on requests are in docs/retrieval.md.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from factutil.tools.retrieval.corpus import DEFAULT_CORPUS, DEFAULT_TOPK, Document, load_corpus

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
MAX_TOPK = 100
MAX_QUERIES = 1024
MAX_REQUEST_BYTES = 1 << 20
DEFAULT_REQUEST_TIMEOUT_S = 10.0
_DRAIN_BYTES = 64 << 20  # an oversized body is read and dropped up to this, so the 413 arrives


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
        ``{"result": [[DOC, ...], ...]}`` without (docs/retrieval.md).
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
            # isdigit() takes "²" and other Unicode digits, which int() refuses; past 18 digits
            # int() meets its digit limit, and no body of ours is that long anyway.
            if not (given.isascii() and given.isdigit() and len(given) <= 18):
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

    One thread per connection (keep-alive); the limits and answers to bad requests are in
    docs/retrieval.md.

    Args:
        host: the address to bind; 127.0.0.1 by default (this machine only).
        port: TCP port; 0 picks a free one (read it from ``server.server_address[1]``).
        default_topk: k when a request gives none (Search-R1's ``--topk``).
        request_timeout_s: seconds a connection may stay silent (while sending a request, or
            idle between requests) before the server answers 408 (a body half sent) or closes
            it (headers half sent, or idle); > 0.

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
