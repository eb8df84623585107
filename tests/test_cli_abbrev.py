"""Every command line takes options only as spelt in full: argparse would otherwise expand a prefix, and a
misspelt or shortened option (`--api-key chat` for `--api-key-env chat`) would silently set another one."""
from __future__ import annotations

import pytest

from batchscope import cli as batchscope_cli
from batchscope import report
from runners import cli as runners_cli
from runners.engines import follower


@pytest.mark.parametrize("argv", [
    ["sweep", "--out", "o", "--api-key", "KEY"],  # a prefix of --api-key-env
    ["sweep", "--out", "o", "--model-n", "m"],  # of --model-name
    ["serve", "--model", "tiny", "--port", "1", "--api-key", "KEY"],  # of --api-key-env
])
def test_the_runner_refuses_a_shortened_option(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        runners_cli.build_parser().parse_args(argv)
    assert exit_.value.code == 2 and f"unrecognized arguments: {argv[-2]}" in capsys.readouterr().err
    full = {"--api-key": "--api-key-env", "--model-n": "--model-name"}[argv[-2]]
    assert getattr(runners_cli.build_parser().parse_args([*argv[:-2], full, argv[-1]]), full[2:].replace("-", "_"))


def test_the_batchscope_cli_refuses_a_shortened_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert batchscope_cli.main(["runs", "--form", "json"]) == batchscope_cli.EXIT_USAGE
    assert "unrecognized arguments: --form" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        report.parse_args(["some-run", "--base", "other-run"])  # of --baseline
    assert "unrecognized arguments: --base" in capsys.readouterr().err
    assert report.parse_args(["some-run", "--baseline", "other-run"]).baseline == "other-run"


def test_the_follower_refuses_a_shortened_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        follower.main(["--ran", "1", "--world", "2", "--port", "1", "--parent", "1", "--device", "cpu", "--spec", "{}"])
    assert "--rank" in capsys.readouterr().err  # required and not given: --ran did not stand for it
