"""Tools beside the core, not steps of the method: the BM25 search server and its client
(:mod:`~factutil.tools.retrieval`), the FactAgent prompt and fact store
(:mod:`~factutil.tools.agent`) and the static-vector distiller (``static_vectors``).

Tools import the core, never the reverse: no method step imports them.
"""
