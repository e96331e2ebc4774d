"""The `numatopo` console script: one entry point, one module per subcommand (the node processes'
are their own `serve` modules). Exit codes: 0 success, 1 a negative answer (e.g. the pod does not
fit), 2 invalid input or a failure the user can act on (message on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Subcommand modules, imported lazily so `numatopo crd` does not pay for kopf or pynvml, nor
# `numatopo agent` (a node process with a memory budget) for the operator's modules. Each has
# HELP, add_arguments(parser) and run(args); its docstring is its description.
COMMANDS = {
    "inspect": "numatopo_cli.commands.inspect",
    "assign": "numatopo_cli.commands.assign",
    "simulate": "numatopo_cli.commands.simulate",
    "domains": "numatopo_cli.commands.domains",
    "operator": "numatopo_cli.commands.operator",
    "exporter": "numatopo_exporter.daemon.serve",
    "agent": "numatopo_exporter.agent.serve",
    "crd": "numatopo_cli.commands.crd",
    "selftest": "numatopo_cli.selftest",
}
# Descriptions laid out by hand (lists, tables), printed as written.
AS_WRITTEN = {"inspect", "assign", "simulate", "domains"}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every subcommand's parser, or only the one named `only` (what a run needs)."""
    parser = argparse.ArgumentParser(
        prog="numatopo",
        description="Topology-aware placement of CPUs, memory, GPUs and NICs for Kubernetes.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS if only is None else (only,):
        module = importlib.import_module(COMMANDS[name])
        command = subparsers.add_parser(
            name,
            help=module.HELP,
            description=module.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter
            if name in AS_WRITTEN
            else argparse.HelpFormatter,
        )
        module.add_arguments(command)
        command.set_defaults(func=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    # The top-level parser has no options but --help, so the first word is the command.
    first = next((word for word in given if not word.startswith("-")), None)
    parser = build_parser(first if first in COMMANDS else None)
    args = parser.parse_args(given)
    try:
        code: int = args.func(args)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
