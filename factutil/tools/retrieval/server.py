"""Search-R1's ``POST /retrieve`` over a :class:`BM25Retriever`, a FastAPI app served by uvicorn
(``factutil serve``; the ``retrieval`` extra). API, reply shapes and limits: docs/retrieval.md."""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from factutil.tools.retrieval.corpus import DEFAULT_CORPUS, DEFAULT_TOPK, BM25Retriever, load_corpus

try:
    import uvicorn
    from fastapi import FastAPI, HTTPException
    from fastapi.responses import JSONResponse
    from starlette.types import ASGIApp, Message, Receive, Scope, Send
except ImportError as error:  # pragma: no cover - depends on the environment
    message = "the retrieval server needs fastapi and uvicorn: pip install 'factutil[retrieval]'"
    raise ImportError(message) from error

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
MAX_TOPK = 100
MAX_QUERIES = 1024
MAX_REQUEST_BYTES = 1 << 20
DEFAULT_REQUEST_TIMEOUT_S = 10.0
_BACKLOG = 128  # the listen backlog: 64 clients connecting at once are all queued
_DRAIN_BYTES = 64 << 20  # an oversized body is read and dropped up to this, so the 413 arrives


class RetrieveRequest(BaseModel):
    """The body of ``POST /retrieve`` (Search-R1's ``QueryRequest``); unknown keys are ignored.
    A bare string as ``queries`` is refused, as by Search-R1's server (a client bug)."""

    model_config = ConfigDict(extra="ignore")

    queries: list[str] = Field(max_length=MAX_QUERIES)
    topk: int | None = Field(None, ge=1, le=MAX_TOPK)
    return_scores: bool = False


def retrieve_reply(retriever: BM25Retriever, request: RetrieveRequest,
                   default_topk: int = DEFAULT_TOPK) -> dict[str, Any]:
    """The JSON reply to one request: ``{"result": [[{"document": DOC, "score": s}, ...], ...]}``
    with ``return_scores``, else ``{"result": [[DOC, ...], ...]}``."""
    found = retriever.search(request.queries, request.topk or default_topk)
    if request.return_scores:
        return {"result": [[{"document": doc.to_reply(), "score": score} for doc, score in hits]
                           for hits in found]}
    return {"result": [[doc.to_reply() for doc, _ in hits] for hits in found]}


class _BoundedBody:
    """ASGI middleware raising from ``receive`` (FastAPI answers JSON): a body over
    ``max_bytes`` (counted as it arrives) -> 413, once read and dropped up to :data:`_DRAIN_BYTES`
    (so a client still sending reads the answer, not a reset); a client silent for ``timeout_s``
    mid-body -> 408 and the connection closed."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float):
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        received = 0

        async def bounded() -> Message:
            nonlocal received
            message = await self._within_timeout(receive)
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                while message.get("more_body") and received <= _DRAIN_BYTES:
                    message = await self._within_timeout(receive)
                    received += len(message.get("body", b""))
                raise HTTPException(413, f"request body over {self.max_bytes} bytes",
                                    headers={"Connection": "close"})
            return message

        await self.app(scope, bounded, send)

    async def _within_timeout(self, receive: Receive) -> Message:
        try:
            return await asyncio.wait_for(receive(), self.timeout_s)
        except asyncio.TimeoutError:
            raise HTTPException(408, f"the request body was not received within "
                                     f"{self.timeout_s:g} s",
                                headers={"Connection": "close"}) from None


def make_app(retriever: BM25Retriever, default_topk: int = DEFAULT_TOPK,
             request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> FastAPI:
    """The FastAPI app: ``POST /retrieve`` and ``GET /health`` over ``retriever``; searches run
    in ``app.state.searches`` (a pool of up to 4 threads), never on the event loop, so /health
    answers at once under load. Raises ValueError: default_topk < 1 or request_timeout_s <= 0."""
    if default_topk < 1:
        raise ValueError(f"default_topk must be >= 1, got {default_topk}")
    if not request_timeout_s > 0:
        raise ValueError(f"request_timeout_s must be > 0, got {request_timeout_s}")
    # strict_content_type=False: a body without a Content-Type is read as JSON, as clients of
    # Search-R1's server send it.
    app = FastAPI(title="factutil retrieval", summary="Search-R1's POST /retrieve over BM25",
                  strict_content_type=False)
    app.add_middleware(_BoundedBody, max_bytes=MAX_REQUEST_BYTES, timeout_s=request_timeout_s)
    # Searches hold the GIL: a few threads run them (FastAPI's pool would run 40), so the event
    # loop, which reads requests and answers /health, never waits behind a queue of them.
    app.state.searches = ThreadPoolExecutor(min(4, os.cpu_count() or 1), "factutil-retrieve")

    @app.post("/retrieve")
    async def retrieve(request: RetrieveRequest) -> JSONResponse:
        return await asyncio.get_running_loop().run_in_executor(
            app.state.searches, lambda: JSONResponse(retrieve_reply(retriever, request, default_topk)))

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "documents": len(retriever.documents)}

    return app


@contextmanager
def running_server(retriever: BM25Retriever, host: str = DEFAULT_HOST, port: int = 0,
                   default_topk: int = DEFAULT_TOPK,
                   request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> Iterator[str]:
    """Serve ``retriever`` in a background thread while the block runs, yielding the URL of
    ``/retrieve``; on exit requests in flight finish and the port is freed. ``port`` 0 picks a
    free one; ``default_topk``: k when a request gives none (Search-R1's ``--topk``);
    ``request_timeout_s``: seconds a client may stay silent mid-body (then 408) or idle between
    requests on a kept-alive connection (then closed). Raises OSError (the port is taken) or as
    :func:`make_app`."""
    app = make_app(retriever, default_topk, request_timeout_s)
    # h11 and asyncio pinned: the answers docs/retrieval.md gives are h11's; log_config=None
    # leaves the process's logging as it is; in a thread, uvicorn installs no signal handlers.
    server = uvicorn.Server(uvicorn.Config(
        app, http="h11", loop="asyncio", lifespan="off", log_config=None, backlog=_BACKLOG,
        timeout_keep_alive=request_timeout_s))
    # Our own socket, so port 0 is known at once and a taken port is an OSError (uvicorn would
    # exit the process); proto IPPROTO_TCP, as asyncio sets TCP_NODELAY only on sockets that say
    # TCP (without it each reply's body waits for the client's delayed ACK, ~40 ms).
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as error:
            taken = error.errno == errno.EADDRINUSE
            raise OSError(error.errno, f"cannot listen on {host}:{port}: " + (
                "the port is in use (another server?); pass another port, or 0 for a free one"
                if taken else (error.strerror or str(error)))) from None
        sock.listen(_BACKLOG)  # connections queue from now on, while uvicorn starts
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        try:
            while not server.started:
                if not thread.is_alive():
                    raise RuntimeError("the retrieval server stopped while starting; see its log")
                time.sleep(0.01)
            netloc = f"[{host}]" if ":" in host else host  # an IPv6 address goes in brackets
            yield f"http://{netloc}:{sock.getsockname()[1]}/retrieve"
        finally:
            server.should_exit = True
            thread.join()
            app.state.searches.shutdown()


def serve(corpus: str | Path | None = None, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
          topk: int = DEFAULT_TOPK, announce: Callable[[str], None] = print,
          request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> None:
    """Load ``corpus`` (default: the bundled 2Wiki paragraphs), index it and serve until Ctrl-C.
    ``announce`` gets one line, ``listening on http://HOST:PORT/retrieve (N documents ...)``,
    once the server is up (so a caller that passed port 0 learns the port)."""
    path = Path(corpus) if corpus is not None else DEFAULT_CORPUS
    if not path.exists():
        raise FileNotFoundError(f"corpus {path} not found; pass --corpus FILE (JSON array or "
                                f"JSONL of title/text)")
    started = time.perf_counter()
    retriever = BM25Retriever(load_corpus(path))
    with running_server(retriever, host, port, topk, request_timeout_s) as url:
        announce(f"listening on {url} ({len(retriever.documents)} documents from {path}, "
                 f"indexed in {time.perf_counter() - started:.1f} s)")
        with suppress(KeyboardInterrupt):
            threading.Event().wait()
