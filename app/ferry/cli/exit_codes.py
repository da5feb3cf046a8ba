"""The ``ferry`` command's exit codes, for :mod:`ferry.cli.main` and every command module.

0 success (for transfers: every file verified), 1 some files failed or the job stopped
unfinished, 2 bad input (nothing was changed), 130 interrupted by Ctrl+C.
"""

from __future__ import annotations

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
