"""`numatopo exporter`: the node's topology publisher (numatopo_exporter.daemon.serve)."""

from __future__ import annotations

import argparse

from numatopo_exporter.daemon import serve


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("exporter", help=serve.HELP, description=serve.__doc__)
    serve.add_arguments(parser)
    parser.set_defaults(func=serve.run)
