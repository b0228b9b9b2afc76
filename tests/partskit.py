"""Parts of a root built by a test itself, to hand to ``Knowledge`` and watch at work.

A test that looks at the index's rows or state, or at the repository, builds that part by its
own name here and opens the root with it (``Knowledge.open(root, index=keeper)``), rather than
reaching into the facade for the part it built.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # conftest imports this module: kiwifs loads with the first test that needs it
    from kiwifs.index.upkeep import IndexKeeper
    from kiwifs.tuning import Tuning


def index_keeper(root: Path, tuning: Tuning | None = None) -> IndexKeeper:
    """The index keeper ``Knowledge`` would build for ``root`` (its config, these knobs)."""
    from kiwifs.config import load_config
    from kiwifs.index.upkeep import IndexKeeper
    from kiwifs.tuning import Tuning

    knobs = tuning if tuning is not None else Tuning.from_env()
    return IndexKeeper(root, load_config(root).search.vector, tuning=knobs)
