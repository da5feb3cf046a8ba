"""The bundle's entry point: exactly what the ``ferry`` console script runs."""

import sys

from ferry.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
