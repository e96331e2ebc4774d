"""The `numatopo` console script: one entry point, one module per subcommand (the node
processes' are their own `serve` modules).

Exit codes: 0 success, 1 a negative answer (e.g. the pod does not fit), 2 invalid input
or a failure the user can act on (message on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Subcommand modules, imported lazily so `numatopo crd` does not pay for kopf or pynvml,
# nor `numatopo agent` (a node process with a memory budget) for the operator's modules.
COMMANDS = (
    "inspect", "assign", "simulate", "domains", "operator", "exporter", "agent", "crd",
    "selftest",
)  # fmt: skip
SERVES = {"exporter": "numatopo_exporter.daemon.serve", "agent": "numatopo_exporter.agent.serve"}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every subcommand's parser, or only the one named `only` (what a run needs)."""
    parser = argparse.ArgumentParser(
        prog="numatopo",
        description="Topology-aware placement of CPUs, memory, GPUs and NICs for Kubernetes.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS if only is None else (only,):
        if name not in SERVES:
            importlib.import_module(f"numatopo_cli.commands.{name}").register(subparsers)
            continue
        serve = importlib.import_module(SERVES[name])
        command = subparsers.add_parser(name, help=serve.HELP, description=serve.__doc__)
        serve.add_arguments(command)
        command.set_defaults(func=serve.run)
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
