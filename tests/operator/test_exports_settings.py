"""The export switches: off by default, on from the chart's variables or the flags."""

from __future__ import annotations

import argparse

import pytest

from numatopo_operator import settings
from numatopo_operator.exports import ExportFormat, enabled_formats
from numatopo_operator.runtime import Runtime


def parsed(argv: list[str], environ: dict[str, str]) -> settings.OperatorSettings:
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser)
    return settings.from_args(parser.parse_args(argv), environ)


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        pytest.param([], {}, [], id="off-by-default"),
        pytest.param(
            [],
            {"NUMATOPO_EXPORT_NRT": "true", "NUMATOPO_EXPORT_VOLCANO": "false"},
            [ExportFormat.NRT],
            id="chart-turns-nrt-on",
        ),
        pytest.param(["--export-volcano"], {}, [ExportFormat.VOLCANO], id="flag-turns-volcano-on"),
        pytest.param(
            ["--no-export-nrt", "--export-volcano"],
            {"NUMATOPO_EXPORT_NRT": "true"},
            [ExportFormat.VOLCANO],
            id="flag-overrides-the-environment",
        ),
    ],
)
def test_export_switches(
    argv: list[str], environ: dict[str, str], expected: list[ExportFormat]
) -> None:
    assert expected == enabled_formats(Runtime(parsed(argv, environ)))


def test_a_switch_that_is_not_a_boolean_is_refused() -> None:
    with pytest.raises(settings.SettingsError, match="export_nrt: 'maybe' is not true or false"):
        settings.from_env({"NUMATOPO_EXPORT_NRT": "maybe"})
