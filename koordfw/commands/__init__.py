"""koordfw's own subcommands. Each module has ``register(commands)`` that adds one subcommand with
:meth:`koordfw.Commands.add`, whose ``func(args) -> int`` runs it. Installed packages add more through the
entry-point group ``koordfw.commands`` (an entry point names such a ``register`` function; see
:mod:`koordfw.command_api`)."""
