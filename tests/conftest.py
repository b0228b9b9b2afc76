"""Shared fixtures: git isolated from the user's configuration, and roots made of real files.

The fixtures every module may ask for:

- ``root``: a fresh versioned root laid out by the blank template (``tmp_path / "kb"``);
  ``knowledge_root`` the same laid out by the knowledge template (``kiwifs init``'s default).
- ``kb``: the library opened on ``root``, closed after the test; ``knowledge_kb`` the same on
  ``knowledge_root``; ``index_keeper``: the index keeper ``kb`` is opened with, for a test that
  looks at the index's rows or state (tests never reach into ``kb`` for its parts).
- ``app_client``: the REST app on ``kb``, in process (no socket), e.g.
  ``app_client.get("/api/kiwi/tree")``; ``asgiclient.app_on(path)`` gives one on another root.
- ``make_root``: a factory writing ``{relpath: text}`` into a fresh folder (no git).
- ``model``: a tiny local embedding model (module-scoped), for ``vectorkit.local_config``.
- ``clock``: a :class:`queuekit.Clock` the test moves by hand, for claims and leases.
- ``anyio_backend``: asyncio, for ``@pytest.mark.anyio`` tests.
- ``isolated_git`` (automatic): ``GIT_CONFIG_GLOBAL`` an empty file, ``GIT_CONFIG_NOSYSTEM``,
  author and committer set, for the test process and every ``git`` or ``kiwifs`` it starts.

Helpers the tests import (plain modules beside this file):

- ``asgiclient``: ``serve_in_process(app)``, a synchronous client of an app run in process, and
  ``app_on(root)``, one of the REST app on a root.
- ``mcpsession``: ``mcp_session(root)``, the MCP server in process through the official client,
  and ``ok``/``fails``/``call`` to read a tool's answer.
- ``realserver``: a real ``kiwifs serve`` (or ``kiwifs mcp --http``) on 127.0.0.1, for what only
  a separate process shows (signals, crashes, several processes, a browser).
- ``partskit``: a root's parts built by the test (``index_keeper(root)``), handed to
  ``Knowledge.open``.
- ``filetree`` (``write_files``), ``fifovalve`` (a FIFO guard), ``gitrepo`` (reading a root's
  git), ``queuekit`` (episodes, a clock), ``vectorkit`` (a small local embedding model),
  ``waiting`` (``wait_for`` a condition, bounded).

A module whose tests need another layout names its fixture for what differs (``queue_root``,
``big_files_root``, …) rather than redefining ``root``.

Keep this file small and generic; helpers that only one test module needs live in that module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings

import partskit
from filetree import Files, write_files
from queuekit import Clock

if TYPE_CHECKING:
    from asgiclient import AppClient
    from kiwifs.index.upkeep import IndexKeeper
    from kiwifs.knowledge import Knowledge

# In CI the property tests draw the same examples every run (a red build is then reproducible,
# never a coin toss); locally they explore new ones each time.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "kiwifs tests",
    "GIT_AUTHOR_EMAIL": "tests@kiwifs.invalid",
    "GIT_COMMITTER_NAME": "kiwifs tests",
    "GIT_COMMITTER_EMAIL": "tests@kiwifs.invalid",
}


def pytest_configure(config: pytest.Config) -> None:
    """Compile kiwifs's byte-code once, before any test (in the xdist controller, or the only
    process), so that the ~100 ``kiwifs`` and ``python -c`` processes the tests start load it
    instead of compiling every module again.

    Without this, where ``PYTHONDONTWRITEBYTECODE`` is set (containers, some CI images) no
    process ever writes the cache and each one compiles kiwifs from source: about 0.1 CPU-s for a
    CLI command and 0.3 for ``kiwifs serve``, on every start.
    """
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller compiled it already
    import compileall

    import kiwifs

    compileall.compile_dir(Path(kiwifs.__file__).parent, quiet=1, workers=1)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """What ``-n auto`` means here: one worker more than the CPUs this process may use.

    Many tests spend part of their time waiting for another process (a real server starting, a
    killed one restarting, Chromium, a git or ``kiwifs`` command); with one worker per CPU such
    a wait left its core idle. On the 2-core machine the suite took 90 s with 2 workers, 74–80 s
    with 3 and 80 s with 4 (docs/dev/benchmarks-log.md).
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return cpus + 1


@pytest.fixture(autouse=True, scope="session")
def isolated_git(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point git (and every ``kiwifs`` subprocess) at an empty global config for the session."""
    config = tmp_path_factory.mktemp("git-home") / "gitconfig"
    config.write_text("")
    patch = pytest.MonkeyPatch()
    patch.setenv("GIT_CONFIG_GLOBAL", str(config))
    for name, value in GIT_ENV.items():
        patch.setenv(name, value)
    yield config
    patch.undo()


@pytest.fixture
def fresh_records() -> Iterator[None]:
    """The commits this process noted (``owncommits``) forgotten before and after a test."""
    from kiwifs.git import owncommits

    owncommits.forget()
    yield
    owncommits.forget()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A versioned root laid out by the blank template, as ``kiwifs init --template blank``."""
    return _init(tmp_path / "kb", "blank")


@pytest.fixture
def knowledge_root(tmp_path: Path) -> Path:
    """A versioned root laid out by the knowledge template, as ``kiwifs init``."""
    return _init(tmp_path / "kb", "knowledge")


def _init(path: Path, template: str) -> Path:
    from kiwifs.knowledge import Knowledge

    # root and knowledge_root share the folder: a test asks for one of them, never both
    assert not path.exists(), f"{path} is laid out already: ask for root or knowledge_root"
    Knowledge.init(path, template)
    return path


@pytest.fixture
def index_keeper(root: Path) -> IndexKeeper:
    """The index keeper of ``kb``, built here and handed to it: a test looks at the index's
    rows and state through this, never through ``kb``."""
    return partskit.index_keeper(root)


@pytest.fixture
def kb(root: Path, index_keeper: IndexKeeper) -> Iterator[Knowledge]:
    """The library opened on ``root`` (with ``index_keeper``), closed after the test."""
    from kiwifs.knowledge import Knowledge

    with Knowledge.open(root, index=index_keeper) as opened:
        yield opened


@pytest.fixture
def app_client(kb: Knowledge) -> Iterator[AppClient]:
    """The REST app on ``kb``, served in process with its lifespan running (``asgiclient``)."""
    from asgiclient import serve_in_process
    from kiwifs.rest.app import create_app

    with serve_in_process(create_app(kb)) as client:
        yield client


@pytest.fixture
def knowledge_kb(knowledge_root: Path) -> Iterator[Knowledge]:
    """The library opened on ``knowledge_root``, closed after the test."""
    from kiwifs.knowledge import Knowledge

    with Knowledge.open(knowledge_root) as opened:
        yield opened


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny local embedding model (``vectorkit``) in a folder named ``m2v``, one per module."""
    from vectorkit import build_model

    return build_model(tmp_path_factory.mktemp("model") / "m2v")


@pytest.fixture
def make_root(tmp_path: Path) -> Callable[..., Path]:
    """A factory: ``make_root({relpath: text})`` writes the files into a fresh folder.

    Each call makes a new folder under ``tmp_path`` (``root``, ``root-1``, …) unless ``name`` is
    given. Text is written as UTF-8 bytes exactly (no newline translation).
    """
    made: list[Path] = []

    def make(files: Files | None = None, name: str | None = None) -> Path:
        folder = tmp_path / (name or ("root" if not made else f"root-{len(made)}"))
        made.append(folder)
        return write_files(folder, files or {})

    return make


@pytest.fixture
def clock() -> Clock:
    """A clock at ``queuekit.T0`` that moves only when the test moves it."""
    return Clock()


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """``@pytest.mark.anyio`` tests run on asyncio (the MCP SDK's and the app's loop)."""
    return "asyncio"


FORK_COUNTER = """
import os
forks = []  # the pids this process forked
_real_fork = os.fork
def _counting_fork():
    pid = _real_fork()
    if pid:
        forks.append(pid)
    return pid
os.fork = _counting_fork
"""


@pytest.fixture
def run_counting_forks() -> Callable[..., Any]:
    """Run a script in a fresh interpreter, with ``forks`` listing the children it forked.

    Fresh, because the walk forks only in a single-threaded process and the test process may
    have threads. Returns what the script prints, parsed as JSON.
    """

    def run(script: str, *args: str) -> Any:
        command = [sys.executable, "-c", FORK_COUNTER + script, *args]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    return run
