"""Tools beside the core: what rolls a FactAgent out, not a step of the method.

- :mod:`factutil.tools.retrieval`: a BM25 search server with Search-R1's ``/retrieve`` API
  (``factutil serve``; needs the ``retrieval`` extra: fastapi, uvicorn, ``bm25s``) and its client; the 2Wiki
  paragraphs it serves by default ship as package data (``data/``);
- :mod:`factutil.tools.agent`: the FactAgent prompt and its fact store;
- :mod:`factutil.tools.static_vectors`: static token vectors distilled from the bundled MiniLM
  for ``embedding_backend="static"`` (``python -m factutil.tools.static_vectors``).

Layering: tools import the core, never the reverse; no method step (``metrics``, ``embed``,
``filters``, ``cluster``, ``linkage``, ``utility``, ``shaping``, ``advantages``) imports them.
"""
