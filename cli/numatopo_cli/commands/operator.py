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
        return main.run(settings.from_args(args, os.environ))
    except settings.SettingsError as exc:
        sys.stderr.write(f"numatopo operator: {exc}\n")
        return 2


HELP = "run the cluster operator (assigner, extender, status)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from numatopo_operator import settings

    settings.add_arguments(parser)
