"""The knobs: one frozen ``Tuning``, the user's few read from the environment, nothing else.

The fast paths' equivalence with their plain paths is tested beside each of them, with a
``Tuning`` that turns one off (``tests/index/search/test_topk.py``,
``tests/index/search/test_termcolumns.py``, ...).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import click
import pytest

import kiwifs
from kiwifs.cli.common import handed_tuning
from kiwifs.knowledge import Knowledge
from kiwifs.services.wiring import Wiring
from kiwifs.tuning import ENVIRONMENT, Tuning

SRC = Path(kiwifs.__file__).parent
# the variables a user may set: the API key (read with the server's flags) and the tuning's
USER_VARIABLES = {"KIWIFS_API_KEY", *ENVIRONMENT}


def test_the_defaults_are_the_fast_paths() -> None:
    tuning = Tuning()
    switches = [f for f in dataclasses.fields(Tuning) if f.type == "bool"]
    assert len(switches) > 15
    assert all(getattr(tuning, f.name) for f in switches if f.name != "strict_fsync")
    assert tuning.strict_fsync is False and tuning.workers is None


def test_the_environment_sets_only_the_user_knobs() -> None:
    tuning = Tuning.from_env(
        {
            "KIWIFS_WORKERS": "2",
            "KIWIFS_FSYNC": "strict",
            "KIWIFS_HEADER_TIMEOUT": "1.5",
            "KIWIFS_GROUP_COMMIT": "0",  # a benchmark's switch once: not read any more
            "KIWIFS_TERM_COLUMNS": "0",
        }
    )
    assert tuning == Tuning(workers=2, strict_fsync=True, header_timeout=1.5)


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({}, Tuning()),
        ({"KIWIFS_WORKERS": "0"}, Tuning(workers=1)),
        ({"KIWIFS_WORKERS": "many", "KIWIFS_HEADER_TIMEOUT": "soon"}, Tuning()),
        ({"KIWIFS_HEADER_TIMEOUT": "0"}, Tuning()),
        ({"KIWIFS_HEADER_TIMEOUT": "-3"}, Tuning()),
        ({"KIWIFS_FSYNC": "serial"}, Tuning()),
    ],
)
def test_a_value_that_does_not_parse_keeps_its_default(
    variables: dict[str, str], expected: Tuning
) -> None:
    assert Tuning.from_env(variables) == expected


def test_a_tuning_is_frozen_and_changed_by_copy() -> None:
    tuning = Tuning()
    with pytest.raises(dataclasses.FrozenInstanceError):
        tuning.term_columns = False  # type: ignore[misc]
    plain = tuning.but(term_columns=False)
    assert plain.term_columns is False and tuning.term_columns is True


def test_the_wiring_hands_its_tuning_down(tmp_path: Path) -> None:
    tuning = Tuning(group_commit=False, read_many=False, kept_trees=False, report_in_sql=False)
    with Wiring(tmp_path, tuning=tuning) as parts:
        assert parts.tuning is tuning
        assert parts.pipeline.tuning is tuning and parts.indexing.tuning is tuning
        assert parts.indexing._open().tuning is tuning
        assert parts.storage.reads_at_once is False


def test_knowledge_reads_the_environment_when_given_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KIWIFS_WORKERS", "1")
    with Knowledge(tmp_path) as kb:
        assert kb.tuning == Tuning(workers=1)


def test_a_tuning_handed_to_the_command_line_reaches_its_commands() -> None:
    """A benchmark runs ``cli.main(args, obj=Tuning(...))``; without one, ``None`` lets
    ``Knowledge`` read the environment."""
    seen: list[Tuning | None] = []

    @click.group()
    def group() -> None:
        pass

    @group.command()
    def probe() -> None:
        seen.append(handed_tuning())

    plain = Tuning(term_columns=False)
    group.main(["probe"], obj=plain, standalone_mode=False)
    group.main(["probe"], standalone_mode=False)
    assert seen == [plain, None]


def test_the_code_reads_no_other_variable_of_ours() -> None:
    """Every ``KIWIFS_*`` name in the package is a user knob; a benchmark's switch is a field
    of ``Tuning``, never a variable read at import."""
    named = set()
    for path in SRC.rglob("*"):
        if path.suffix in {".py", ".toml"}:
            named |= set(re.findall(r"KIWIFS_[A-Z0-9_]+", path.read_text(encoding="utf-8")))
    assert named == USER_VARIABLES
    assert len(USER_VARIABLES) <= 6
