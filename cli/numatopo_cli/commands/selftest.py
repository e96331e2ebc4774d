"""`numatopo selftest`: an install checked end to end (numatopo_cli.selftest; `helm test`)."""

from __future__ import annotations

import argparse

from numatopo_cli import selftest


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("selftest", help=selftest.HELP, description=selftest.__doc__)
    selftest.add_arguments(parser)
