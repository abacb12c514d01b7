"""Search-R1's documents (``contents``: the quoted title on the first line), corpus files and
the BM25 index the server searches."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from factutil.search_r1 import document_passage

DEFAULT_TOPK = 3
"""Passages per query when a request (server) or a client gives none (Search-R1's ``--topk``)."""
DEFAULT_CORPUS = (Path(__file__).resolve().parent.parent / "data"
                  / "hipporag_2wikimultihopqa_corpus.json")
"""The 2Wiki paragraphs shipped as package data (HippoRAG's 2wikimultihopqa corpus, MIT)."""


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
        """A reply's ``DOC``: Search-R1's ``id`` and ``contents``, plus ``title`` and ``text``."""
        return {"id": self.id, "contents": self.contents, "title": self.title, "text": self.text}


def _document_from(item: Any, index: int, where: str) -> Document:
    """A corpus item as a :class:`Document`: read as a retrieved document is
    (:func:`factutil.search_r1.document_passage`), its id ``id`` or ``_id``, else ``index``."""
    if not isinstance(item, Mapping):  # a malformed corpus line is a data error, named by its place
        raise ValueError(f"{where}: expected an object with title/text or contents, got {type(item).__name__}")  # noqa: TRY004
    try:
        passage = document_passage(item)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    return Document(str(item.get("id", item.get("_id", index))), passage.title, passage.text)


def load_corpus(path: str | Path) -> list[Document]:
    """Read a corpus: a JSON array of documents, or JSONL with one per line. A document is
    ``{"title", "text"}`` (HippoRAG's form) or ``{"id", "contents"}`` (Search-R1's wiki-18);
    ``id`` (or ``_id``) defaults to the 0-based position. Raises FileNotFoundError, or
    ValueError for an empty file or a malformed document (``FILE:LINE`` or ``FILE[i]``).
    """
    path = Path(path)
    raw = path.read_text(encoding="utf-8")
    documents: list[Document] = []
    if raw.lstrip().startswith("["):
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
    """BM25 over each document's ``title + " " + text`` (``bm25s`` defaults, English
    stopwords): deterministic, and thread-safe for concurrent :meth:`search` calls. Raises
    ImportError without ``bm25s``, ValueError without documents."""

    def __init__(self, documents: Sequence[Document]):
        if not documents:
            raise ValueError("BM25Retriever needs at least one document")
        try:
            import bm25s
            from bm25s.tokenization import Tokenizer
        except ImportError as error:  # pragma: no cover - depends on the environment
            message = "BM25Retriever needs bm25s: pip install 'factutil[retrieval]'"
            raise ImportError(message) from error
        self.documents = list(documents)
        self._tokenizer = Tokenizer(stopwords="en")
        texts = [f"{doc.title} {doc.text}" for doc in self.documents]
        ids = self._tokenizer.tokenize(texts, update_vocab=True, return_as="ids",
                                       show_progress=False)
        self._bm25 = bm25s.BM25()
        self._bm25.index(ids, show_progress=False)
        self._lock = threading.Lock()

    def search(self, queries: Sequence[str], topk: int) -> list[list[tuple[Document, float]]]:
        """Per query, its top ``min(topk, len(corpus))`` ``(document, BM25 score)``, best first
        (a query with no known word still gets them, all scored 0). Raises ValueError: topk < 1.
        """
        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        k = min(topk, len(self.documents))
        results: list[list[tuple[Document, float]]] = []
        for query in queries:
            # One query per turn of the lock: a large request does not hold the others back.
            with self._lock:
                ids = self._tokenizer.tokenize([query], update_vocab=False, return_as="ids",
                                               show_progress=False)
                hits, scores = self._bm25.retrieve(ids, k=k, show_progress=False)
            results.append([(self.documents[int(i)], float(s))
                            for i, s in zip(hits[0], scores[0])])
        return results
