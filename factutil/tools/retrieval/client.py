"""The client of a Search-R1 ``/retrieve`` endpoint: reads both reply shapes and turns every
failure (timeout, HTTP error, bad JSON) into an observation that says so, never an exception.
"""

from __future__ import annotations

import json
import logging
import math
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from factutil.errors import number_value
from factutil.search_r1 import document_passage
from factutil.tools.retrieval.corpus import DEFAULT_TOPK

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Passage:
    """One retrieved passage as a client reads it; ``score`` is None when the reply had none."""

    title: str
    text: str
    score: float | None = None


def _passage(item: Any) -> Passage:
    """A reply's hit (:func:`factutil.search_r1.document_passage`) with its score, if finite."""
    score = number_value(item.get("score")) if isinstance(item, Mapping) and "document" in item else None
    _, title, text = document_passage(item)
    return Passage(title, text, score if score is not None and math.isfinite(score) else None)


def parse_reply(payload: Any) -> list[list[Passage]]:
    """One list of :class:`Passage` per query from a decoded ``/retrieve`` reply in either
    Search-R1 shape (``{"result": [[...], ...]}``, with or without scores); ValueError (saying
    what was found) for anything else."""
    if not isinstance(payload, Mapping) or "result" not in payload:
        found = sorted(payload) if isinstance(payload, Mapping) else type(payload).__name__
        raise ValueError(f"reply has no 'result' (got {found})")
    result = payload["result"]
    if not isinstance(result, list) or not all(isinstance(hits, list) for hits in result):
        raise ValueError("reply 'result' must be a list of lists, one per query")
    return [[_passage(item) for item in hits] for hits in result]


def format_observation(passages: Iterable[Passage]) -> str:
    """Passages as one observation, lines ``Doc i (Title: ...) text`` from i = 1 (the bundled
    rollouts' form; Search-R1 writes ``Doc i(Title: ...)``), or ``"No documents found."``."""
    lines = [f"Doc {rank} (Title: {passage.title}) {passage.text}"
             for rank, passage in enumerate(passages, start=1)]
    return "\n".join(lines) if lines else "No documents found."


@dataclass(frozen=True, slots=True)
class SearchResult:
    """What one search gave: the observation, the error (None when it worked), seconds taken."""

    observation: str
    error: str | None
    seconds: float

    @property
    def ok(self) -> bool:
        """True when the retriever answered with passages."""
        return self.error is None


class RetrievalClient:
    """A blocking client of a Search-R1 ``/retrieve`` endpoint (``url``) that never raises on a
    failed search: ``topk`` passages per query (>= 1), ``timeout_s`` per HTTP attempt (> 0),
    ``retries`` extra attempts after a timeout, connection error or HTTP 5xx (a 4xx or a
    malformed reply is not retried), ``return_scores`` asks for the scored shape (both are
    read), observations cut to ``max_observation_chars`` (None: no cut)."""

    def __init__(self, url: str, topk: int = DEFAULT_TOPK, timeout_s: float = 10.0,
                 retries: int = 1, return_scores: bool = True,
                 max_observation_chars: int | None = None):
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
        """Retrieve for one query. A failure comes back as the observation ``"Search failed:
        ..."`` (timed out, HTTP 500, unreachable, malformed reply) with ``error`` set."""
        started = time.perf_counter()
        body = json.dumps({"queries": [query], "topk": self.topk,
                           "return_scores": self.return_scores}).encode("utf-8")
        error = "no attempt made"
        for _attempt in range(self.retries + 1):
            request = urllib.request.Request(self.url, data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    payload = json.loads(response.read().decode("utf-8"))
            except urllib.error.HTTPError as http_error:
                error = f"HTTP {http_error.code} from the retriever"
                if http_error.code < 500:
                    break
                continue
            except (TimeoutError, urllib.error.URLError) as failure:  # socket.timeout included
                reason = getattr(failure, "reason", failure)
                if isinstance(reason, TimeoutError):
                    error = f"the retriever timed out after {self.timeout_s:g} s"
                else:
                    error = f"the retriever is unreachable ({reason})"
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
