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
and one without a ``Content-Length`` 411, one whose ``Content-Length`` is not a plain ASCII
number of at most 18 digits 400; a client silent for ``request_timeout_s`` with its body half sent
gets 408 and its connection is closed; one silent before its headers end is disconnected without
an answer (there is no request yet to answer). Searches take a lock one query at a time, so
a large request never holds the others back for long. ``benchmarks/serve_load.py`` measures it
under load.

The client side (:class:`RetrievalClient`, :func:`parse_reply`, :func:`format_observation`) reads
both reply shapes and turns every failure (timeout, HTTP error, bad JSON) into an observation that
says so, never an exception: a retriever hiccup must not crash a rollout.

The package is three modules: :mod:`~factutil.tools.retrieval.corpus` (documents, Search-R1's
``contents`` form, reading a corpus file), :mod:`~factutil.tools.retrieval.server` (the BM25 index
and the HTTP server) and :mod:`~factutil.tools.retrieval.client` (the client and the reply
reader); their public names are re-exported here. ``bm25s`` is imported when an index is built,
and ``import factutil`` imports none of this. Nothing here reads the environment.
"""

from factutil.tools.retrieval.client import (
    Passage,
    RetrievalClient,
    SearchResult,
    format_observation,
    parse_reply,
)
from factutil.tools.retrieval.corpus import (
    DEFAULT_CORPUS,
    DEFAULT_TOPK,
    Document,
    load_corpus,
    split_contents,
)
from factutil.tools.retrieval.server import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    DEFAULT_REQUEST_TIMEOUT_S,
    MAX_QUERIES,
    MAX_REQUEST_BYTES,
    MAX_TOPK,
    BM25Retriever,
    RetrieveRequest,
    make_server,
    retrieve_reply,
    serve,
)

__all__ = [
    "DEFAULT_CORPUS", "DEFAULT_HOST", "DEFAULT_PORT", "DEFAULT_REQUEST_TIMEOUT_S", "DEFAULT_TOPK",
    "MAX_QUERIES", "MAX_REQUEST_BYTES", "MAX_TOPK", "BM25Retriever", "Document", "Passage",
    "RetrievalClient", "RetrieveRequest", "SearchResult", "format_observation", "load_corpus",
    "make_server", "parse_reply", "retrieve_reply", "serve", "split_contents",
]
