"""`numatopo operator`: run the cluster operator (kopf, scheduler extender, status writer).

kopf and aiohttp are imported only when this command runs, so the other commands stay
light. Every flag can also be given as `NUMATOPO_<FLAG>` in the environment.
"""

from __future__ import annotations

import argparse
import os
import sys


def run(args: argparse.Namespace) -> int:
    from numatopo_operator import main, settings

    try:
        configured = settings.from_args(args, os.environ)
        return main.run(configured)
    except settings.SettingsError as exc:
        sys.stderr.write(f"numatopo operator: {exc}\n")
        return 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from numatopo_operator import settings

    parser = subparsers.add_parser(
        "operator",
        help="run the cluster operator (assigner, extender, status)",
        description=__doc__,
    )
    settings.add_arguments(parser)
    parser.set_defaults(func=run)
