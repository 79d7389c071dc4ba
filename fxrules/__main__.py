"""``python -m fxrules``: the ``fxrules`` command, where the console script is not on the PATH."""

from fxrules.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
