"""Every command and subcommand of the `tenure` console script has --help with an example."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tenure.cli import build_parser, main


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name)
                yield from _commands(sub, (*path, name))


def test_every_subcommand_has_help_with_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    commands = list(_commands(build_parser()))
    assert ("deploy",) in commands and ("task", "worker") in commands
    without = []
    for command in commands:  # in this process: a python per command took about a minute
        with pytest.raises(SystemExit) as exited:
            main([*command, "--help"])
        assert exited.value.code == 0
        shown = capsys.readouterr().out
        assert shown.startswith(f"usage: tenure {' '.join(command)}")
        if "example: tenure " + command[0] not in shown and "examples:" not in shown:
            without.append(" ".join(command))
    assert without == [], f"commands whose --help shows no example: {without}"


def test_the_console_script_shows_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tenure", "--help"], capture_output=True, text=True, check=True
    )
    assert result.stdout.startswith("usage: tenure")
