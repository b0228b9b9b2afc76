"""A rebuild of the index never runs beside a server that keeps it current.

``kiwifs reindex`` next to a running ``kiwifs serve`` once dropped the tables under the server:
the server read "no such table", took it for damage and rebuilt too, the two rebuilds collided
(``UNIQUE constraint failed: files.id``) and acknowledged writes were not searchable for seconds.
Now every watcher holds the rebuild lock shared and a rebuild elsewhere is refused while it does
(``kiwifs.index.rebuildlock``). One real server, real CLI processes, real SQLite.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import httpx
import pytest

from filetree import write_files
from kiwifs.errors import Locked
from kiwifs.index.upkeep import IndexRefresh
from kiwifs.knowledge import Knowledge
from kiwifs.server.lifecycle import Serving
from realserver import KIWIFS, serving

API = "/api/kiwi"


@pytest.fixture
def notes_root(root: Path) -> Path:
    """The blank root with twenty notes, not yet indexed."""
    return write_files(root, {f"notes/n{n}.md": f"# note {n}\nmarmalade {n}\n" for n in range(20)})


def reindex(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KIWIFS, "reindex", "--root", str(root)], capture_output=True, text=True, check=False
    )


def test_reindex_beside_a_real_server_checks_in_place_and_the_server_keeps_every_write(
    notes_root: Path,
) -> None:
    log = notes_root.parent / "serve.log"
    written: list[str] = []
    with serving(notes_root, log) as (base, _), httpx.Client(base_url=base, timeout=30) as client:

        def write(start: int) -> None:
            for n in range(start, start + 40):
                rel = f"live/w{n}.md"
                response = client.put(f"{API}/file", params={"path": rel}, content=f"quince {n}\n")
                assert response.status_code == 200, response.text
                written.append(rel)

        writer = threading.Thread(target=write, args=(0,))
        writer.start()
        beside = [reindex(notes_root) for _ in range(3)]  # while the writes go on
        writer.join()
        for result in beside:  # never a rebuild under the server: a check in place
            assert result.returncode == 0, result.stderr
            assert "a kiwifs server keeps this index current: checked it" in result.stdout
            assert "stop the server" in result.stderr
        last = reindex(notes_root)  # the writes all acknowledged: the index holds every file
        assert last.returncode == 0 and "against the 61 files" in last.stdout, last.stdout
        hits = client.get(f"{API}/search", params={"q": "quince", "limit": 200}).json()
        assert sorted(hit["path"] for hit in hits["results"]) == sorted(written)
        found = client.get(f"{API}/search", params={"q": "marmalade", "limit": 200}).json()
        assert len(found["results"]) == 20
    text = log.read_text(errors="replace")
    assert "no such table" not in text and "rebuilding" not in text, text
    done = reindex(notes_root)  # the server gone, the rebuild runs
    assert done.returncode == 0, done.stderr
    assert "indexed 61 files" in done.stdout


def test_a_watching_process_holds_off_a_rebuild_from_another(notes_root: Path) -> None:
    with Knowledge.open(notes_root) as server, Knowledge.open(notes_root) as other:
        Serving(server).start_watching()
        with pytest.raises(Locked, match="stop it"):
            other.reindex()
        with pytest.raises(Locked):
            other.reindex_vectors()
        (notes_root / "notes" / "late.md").write_text("# late\n")  # an edit no event reported
        checked = other.reindex_or_reconcile()
        assert (checked.rebuilt, checked.files) == (False, 22) and checked.updated >= 1
        (notes_root / "notes" / "late.md").unlink()
        assert server.reindex() == 21  # the watching process itself may rebuild
        Serving(server).stop_watching()
        assert other.reindex() == 21
        assert other.reindex_or_reconcile() == IndexRefresh(21, True)
