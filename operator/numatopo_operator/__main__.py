"""`python -m numatopo_operator`: the same as `numatopo operator`."""

from __future__ import annotations

import argparse
import os
import sys

from numatopo_operator import main, settings


def _main() -> int:
    parser = argparse.ArgumentParser(prog="numatopo-operator", description=main.__doc__)
    settings.add_arguments(parser)
    args = parser.parse_args()
    try:
        configured = settings.from_args(args, os.environ)
    except settings.SettingsError as exc:
        parser.error(str(exc))
    return main.run(configured)


if __name__ == "__main__":
    sys.exit(_main())
