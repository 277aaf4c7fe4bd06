"""koordfw's own subcommands. Each module has ``register(subparsers)`` that adds one subcommand
whose ``func(args) -> int`` runs it. Installed packages add more through the entry-point group
``koordfw.commands`` (an entry point names such a ``register`` function)."""
