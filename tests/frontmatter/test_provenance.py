"""Provenance: the ``X-Provenance`` header, actor sanitising and ``derived-from`` injection.

KiwiFS's cases, with kiwifs's changes: a non-empty malformed header raises
:class:`InvalidProvenance` (blank means "none"), and the same type/id/actor is not added twice.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kiwifs.errors import InvalidFrontmatter, InvalidProvenance
from kiwifs.frontmatter.edit import append_entries, edit_frontmatter
from kiwifs.frontmatter.provenance import (
    DEFAULT_ACTOR,
    MAX_ACTOR_BYTES,
    Provenance,
    _new_block,
    inject_provenance,
    parse_provenance,
    sanitize_actor,
)
from kiwifs.frontmatter.reader import read_frontmatter, split

DATE = "2026-05-02T10:00:00Z"


def derived_from(data: bytes) -> list[dict[str, object]]:
    fm = read_frontmatter(data)
    assert fm.problem is None, fm.problem
    value = fm.data["derived-from"]
    assert isinstance(value, list)
    return value


# -- parsing the header ------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "", "   ", "\t"])
def test_blank_header_means_no_provenance(value: str | None) -> None:
    assert parse_provenance(value) is None


@pytest.mark.parametrize("value", ["runid", "run:", ":run-1", " : ", "run:   ", "   :x"])
def test_malformed_header_is_refused_with_a_hint(value: str) -> None:
    with pytest.raises(InvalidProvenance) as err:
        parse_provenance(value)
    assert "type:id" in err.value.message
    assert err.value.code == "invalid_provenance"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("run:run-249", Provenance("run", "run-249")),
        ("  run  :  run-249 ", Provenance("run", "run-249")),
        ("run:prefix:suffix", Provenance("run", "prefix:suffix")),
        ("commit:abc123", Provenance("commit", "abc123")),
    ],
)
def test_valid_header(value: str, expected: Provenance) -> None:
    assert parse_provenance(value) == expected


def test_header_with_control_characters_is_refused() -> None:
    with pytest.raises(InvalidProvenance):
        parse_provenance("run:a\x01b")


def test_provenance_prints_as_type_colon_id() -> None:
    assert str(Provenance("run", "prefix:suffix")) == "run:prefix:suffix"


# -- the actor ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "", "   ", "\x01\x02\x7f", "\n\t "])
def test_actor_defaults_to_anonymous(value: str | None) -> None:
    assert sanitize_actor(value) == DEFAULT_ACTOR == "anonymous"


def test_actor_default_can_be_chosen() -> None:
    assert sanitize_actor("", "kiwifs") == "kiwifs"


def test_actor_drops_control_characters_and_trims() -> None:
    assert sanitize_actor("  agent:\x00exec\n_abc\x7f \r") == "agent:exec_abc"
    assert sanitize_actor("a\tb") == "ab"


def test_actor_is_cut_to_256_bytes_on_a_character_boundary() -> None:
    assert sanitize_actor("a" * 300) == "a" * MAX_ACTOR_BYTES
    # "é" is two bytes: 255 bytes of ASCII then "é" would split it; the half is dropped
    cut = sanitize_actor("a" * 255 + "é" + "zzz")
    assert cut == "a" * 255
    assert len("€".encode()) == 3
    euros = sanitize_actor("€" * 100)
    assert euros == "€" * 85  # 255 bytes; the 86th would need bytes 256-258
    assert len(euros.encode()) <= MAX_ACTOR_BYTES


def test_actor_keeps_unicode() -> None:
    assert sanitize_actor("agent:café") == "agent:café"


# -- injection ---------------------------------------------------------------------------------


def test_inject_creates_frontmatter() -> None:
    out = inject_provenance(
        b"# Hello\n\nbody\n", Provenance("run", "run-249"), "agent:exec_abc", DATE
    )
    assert out == (
        b"---\n"
        b"derived-from:\n"
        b"  - type: run\n"
        b"    id: run-249\n"
        b'    date: "2026-05-02T10:00:00Z"\n'
        b"    actor: agent:exec_abc\n"
        b"---\n"
        b"# Hello\n\nbody\n"
    )
    entries = derived_from(out)
    assert entries == [{"type": "run", "id": "run-249", "date": DATE, "actor": "agent:exec_abc"}]


def test_inject_without_date_uses_now_in_utc() -> None:
    out = inject_provenance(b"x\n", Provenance("run", "r"), "a")
    (entry,) = derived_from(out)
    date = str(entry["date"])
    assert len(date) == 20 and date.endswith("Z") and date[10] == "T"


def test_inject_appends_to_existing_list() -> None:
    content = (
        b"---\nstatus: published\nderived-from:\n"
        b'  - type: run\n    id: run-001\n    date: "2026-01-01T00:00:00Z"\n'
        b"---\n# Title\n"
    )
    out = inject_provenance(content, Provenance("commit", "abc123"), "", DATE)
    fm = read_frontmatter(out).data
    assert fm["status"] == "published"
    entries = fm["derived-from"]
    assert [e["id"] for e in entries] == ["run-001", "abc123"]
    assert entries[1]["type"] == "commit"
    assert "actor" not in entries[1]
    assert split(out)[1] == b"# Title\n"


def test_inject_noop_without_provenance() -> None:
    content = b"# Hi\n"
    assert inject_provenance(content, None, "alice") is content


def test_inject_keeps_other_fields_their_order_and_comments() -> None:
    content = b"---\nstatus: draft  # not yet\npriority: high\n---\n\nbody text"
    out = inject_provenance(content, Provenance("manual", "ticket-42"), "alice", DATE)
    fm_text = split(out)[0].decode()
    assert fm_text.index("status") < fm_text.index("priority") < fm_text.index("derived-from")
    assert "# not yet" in fm_text
    fm = read_frontmatter(out).data
    assert fm["status"] == "draft" and fm["priority"] == "high"
    assert fm["derived-from"] == [
        {"type": "manual", "id": "ticket-42", "date": DATE, "actor": "alice"}
    ]
    assert split(out)[1] == b"\nbody text"


def test_inject_keeps_body_byte_for_byte_including_crlf() -> None:
    body = b"\r\n# Title\r\n\r\n  indented\r\ntrailing spaces   \r\n\x00binary\xff"
    content = b"---\r\ntitle: x\r\n---\r\n" + body
    out = inject_provenance(content, Provenance("run", "r-1"), "bob", DATE)
    assert out.endswith(b"\n---\n" + body)
    assert split(out)[1] == body
    assert read_frontmatter(out).data["title"] == "x"


def test_inject_into_empty_content_gives_frontmatter_only() -> None:
    out = inject_provenance(b"", Provenance("run", "r-1"), "bob", DATE)
    assert out.startswith(b"---\n") and out.endswith(b"---\n")
    assert derived_from(out)[0]["id"] == "r-1"


def test_inject_into_empty_frontmatter() -> None:
    out = inject_provenance(b"---\n---\nbody\n", Provenance("run", "r-1"), "bob", DATE)
    assert derived_from(out)[0]["id"] == "r-1"
    assert split(out)[1] == b"body\n"


def test_numeric_ids_stay_strings() -> None:
    out = inject_provenance(b"x", Provenance("run", "1"), "bob", DATE)
    assert b'id: "1"' in out
    assert derived_from(out)[0]["id"] == "1"


def test_scalar_derived_from_becomes_a_list() -> None:
    out = inject_provenance(
        b"---\nderived-from: legacy\n---\n", Provenance("run", "r-1"), "bob", DATE
    )
    entries = derived_from(out)
    assert entries[0] == "legacy"
    assert entries[1]["id"] == "r-1"


def test_flow_style_list_is_appended_to() -> None:
    out = inject_provenance(
        b"---\nderived-from: []\n---\nbody", Provenance("run", "r-1"), "bob", DATE
    )
    assert [e["id"] for e in derived_from(out)] == ["r-1"]


def test_inject_is_idempotent_for_the_same_type_id_and_actor() -> None:
    prov = Provenance("run", "run-249")
    once = inject_provenance(b"# Hello\n", prov, "agent", DATE)
    twice = inject_provenance(once, prov, "agent", "2027-01-01T00:00:00Z")
    assert twice == once


def test_a_different_actor_or_id_is_a_new_entry() -> None:
    once = inject_provenance(b"# Hello\n", Provenance("run", "r-1"), "agent", DATE)
    other_actor = inject_provenance(once, Provenance("run", "r-1"), "someone", DATE)
    other_id = inject_provenance(once, Provenance("run", "r-2"), "agent", DATE)
    other_type = inject_provenance(once, Provenance("job", "r-1"), "agent", DATE)
    for out in (other_actor, other_id, other_type):
        assert len(derived_from(out)) == 2


def test_root_sequence_frontmatter_is_refused_not_corrupted() -> None:
    content = b"---\n- a\n- b\n---\nbody\n"
    with pytest.raises(InvalidFrontmatter) as err:
        inject_provenance(content, Provenance("run", "r-1"), "bob", DATE)
    assert "not a mapping" in err.value.message


def test_unterminated_frontmatter_is_refused() -> None:
    with pytest.raises(InvalidFrontmatter) as err:
        inject_provenance(b"---\ntitle: x\nbody\n", Provenance("run", "r"), "bob", DATE)
    assert "not terminated" in err.value.message


def test_invalid_yaml_is_refused() -> None:
    with pytest.raises(InvalidFrontmatter) as err:
        inject_provenance(b"---\ntitle: [x\n---\nbody\n", Provenance("run", "r"), "b", DATE)
    assert "parse frontmatter" in err.value.message


def test_output_is_valid_yaml_for_awkward_values() -> None:
    prov = Provenance("run", "id: with # colon and 'quotes'")
    out = inject_provenance(b"x", prov, 'agent "quoted": yes', DATE)
    data = yaml.safe_load(split(out)[0])
    assert data["derived-from"][0]["id"] == prov.id
    assert data["derived-from"][0]["actor"] == 'agent "quoted": yes'


# -- the fast path for files without frontmatter --------------------------------------------

_values = st.one_of(
    st.text(alphabet="abcXYZ019_.:@+/- #'\"\tnoyesON\u00e9", min_size=1, max_size=12),
    st.text(alphabet="0123456789eE.+-_xobnaif:", min_size=1, max_size=8),  # number-like
)


def _round_trip(content: bytes, prov: Provenance, actor: str, date: str) -> bytes:
    def mutate(doc: Any) -> bool:
        entry = {"type": prov.type, "id": prov.id, "date": date}
        if actor:
            entry["actor"] = actor
        append_entries(doc, "derived-from", [entry])
        return True

    return edit_frontmatter(content, mutate)


@settings(max_examples=300, deadline=None)
@given(
    typ=_values,
    ident=_values,
    actor=st.one_of(st.just(""), _values),
    body=st.sampled_from([b"", b"# T\n\nbody\n", b"\r\n# crlf\r\n", b"plain"]),
)
def test_fast_new_block_equals_the_round_trip(
    typ: str, ident: str, actor: str, body: bytes
) -> None:
    """Whenever the shortcut answers, it answers byte for byte what the YAML editor writes."""
    prov = Provenance(typ.strip() or "t", ident.strip() or "i")
    date = "2026-05-02T10:00:00Z"
    fast = _new_block(body, prov, actor, date)
    if fast is not None:
        assert fast == _round_trip(body, prov, actor, date)


def test_fast_new_block_is_taken_for_the_common_case() -> None:
    out = _new_block(
        b"# Hello\n", Provenance("run", "run-249"), "agent:exec_abc", "2026-05-02T10:00:00Z"
    )
    assert out == _round_trip(
        b"# Hello\n", Provenance("run", "run-249"), "agent:exec_abc", "2026-05-02T10:00:00Z"
    )
