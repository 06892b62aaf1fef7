"""``python -m contextkit``: the same command line as the ``contextkit`` script."""

import sys

from contextkit.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
