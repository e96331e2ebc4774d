"""`numatopo inspect` (being built)."""

from __future__ import annotations

import argparse


def run(args: argparse.Namespace) -> int:
    raise SystemExit("numatopo inspect: not implemented yet")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("inspect", help="(being built)")
    parser.set_defaults(func=run)
