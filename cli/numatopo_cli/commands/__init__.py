"""Subcommands of the `numatopo` CLI, one module each, each with `register(subparsers)`."""
