"""The ``lakehouse`` subcommands, a module a group, each a :class:`~lakehouse.commands.base.Command`
(its options and what it runs); ``lakehouse.cli`` assembles them into one parser."""
