"""Static token vectors distilled from the bundled MiniLM, for ``embedding_backend="static"``.

    python -m factutil.tools.static_vectors [PATH] [--dims 256] [--batch-size 256] [--quiet]

PATH defaults to :func:`~factutil.embed.default_static_dir`, where
:class:`~factutil.embed.StaticEmbedder` looks (and makes them on first use when missing): this
command makes them ahead, e.g. while building an image. Nothing is downloaded.
"""

from __future__ import annotations

import argparse

from factutil.embed import default_static_dir
from factutil.embed.backends import distill_static

__all__ = ["distill_static", "main"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m factutil.tools.static_vectors",
                                     description="Distil static token vectors from the bundled "
                                                 "MiniLM (embedding_backend='static').")
    parser.add_argument("path", nargs="?", default=None,
                        help=f"output folder (default {default_static_dir()})")
    parser.add_argument("--dims", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    args = parser.parse_args(argv)
    distill_static(args.path or default_static_dir(), dims=args.dims, batch_size=args.batch_size,
                   progress=not args.quiet)


if __name__ == "__main__":
    main()
