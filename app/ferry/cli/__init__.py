"""The ``ferry`` subcommands. Each module exposes ``register(subparsers)``; handlers return an exit code."""
