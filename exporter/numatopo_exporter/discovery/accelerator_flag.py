"""The `--accelerator RULE` flag shared by `numatopo exporter` and `numatopo inspect`."""

from __future__ import annotations

import argparse

from numatopo_engine.accelerators import AcceleratorRule, AcceleratorRuleError, parse_rule


def _rule(text: str) -> AcceleratorRule:
    try:
        return parse_rule(text)
    except AcceleratorRuleError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_accelerator_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--accelerator",
        dest="accelerators",
        action="append",
        type=_rule,
        default=[],
        metavar="RULE",
        help="also count PCI functions matching RULE as accelerators, before the built-in "
        "rules (repeatable): vendor=0x1da3,class=0x1200,name=habana,resource=habana.ai/gaudi"
        "[,devices=0x1020:0x1060]",
    )
