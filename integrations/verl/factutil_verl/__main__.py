"""``python -m factutil_verl check``: see :mod:`factutil_verl.check`."""

from factutil_verl.check import main

if __name__ == "__main__":
    raise SystemExit(main())
