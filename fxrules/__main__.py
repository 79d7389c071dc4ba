"""``python -m fxrules``: the ``fxrules`` command, where the console script is not on the PATH."""

from fxrules.cli import main

raise SystemExit(main())
