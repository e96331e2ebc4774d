"""`numatopo agent`: the node's cpuset enforcer (numatopo_exporter.agent.serve)."""

from __future__ import annotations

import argparse

from numatopo_exporter.agent import serve


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("agent", help=serve.HELP, description=serve.__doc__)
    serve.add_arguments(parser)
    parser.set_defaults(func=serve.run)
