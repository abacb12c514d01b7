"""Tools beside the core, not steps of the method: the BM25 search server and its client
(``retrieval``), the FactAgent prompt and fact store (``agent``) and the static-vector
distiller (``static_vectors``). Tools import the core; no method step imports them."""
