"""The table-name rules: qualified names from parts, folder names, and names users write."""

from __future__ import annotations

import posixpath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_cdc_provider.contract.tables import (
    MAX_FOLDER_BYTES,
    TableNameError,
    check_unambiguous,
    folder_table,
    lookup,
    matching_reading,
    name_readings,
    qualify,
    split_qualified,
    table_folder,
)

# Parts as hostile as a quoted identifier allows: any character, dots, quotes, slashes, empty.
parts = st.text(alphabet=st.characters(codec="utf-8"), max_size=40) | st.sampled_from(
    ["", ".", "..", "../..", '"', '""', "a.b", "_x", ".hidden", "x/../../..", "%2F", "~", " "]
)
part_lists = st.lists(parts, min_size=1, max_size=4)


@given(part_lists)
def test_a_qualified_name_reads_back_as_its_parts(names):
    assert split_qualified(qualify(names)) == tuple(names)


@given(part_lists, part_lists)
def test_different_parts_never_share_a_name_or_a_folder(a, b):
    if a != b:
        assert qualify(a) != qualify(b)
        assert table_folder(qualify(a)) != table_folder(qualify(b))


@settings(max_examples=300)
@given(part_lists)
def test_a_folder_name_is_one_visible_name_inside_the_output(names):
    folder = table_folder(qualify(names))
    assert folder and "/" not in folder and "\\" not in folder
    assert folder not in (".", "..") and folder[0] not in "._" and folder[-1] not in ". "
    assert not any(ord(c) < 0x20 or ord(c) == 0x7F for c in folder)
    assert len(folder.encode("utf-8")) <= MAX_FOLDER_BYTES
    assert posixpath.normpath(posixpath.join("/out", folder)).startswith("/out/")
    reverse = folder_table(folder)
    assert reverse is None or reverse == qualify(names)


@pytest.mark.parametrize(
    ("parts", "folder"),
    [
        (["inventory", "customers"], "inventory.customers"),
        (["db", "public", "orders"], "db.public.orders"),
        (["库", "客户"], "库.客户"),
        (["shop", "my table"], "shop.my table"),
        (["inventory", "../../../escaped"], "inventory.%22..%2F..%2F..%2Fescaped%22"),
        (["x/../../..", "victim"], "%22x%2F..%2F..%2F..%22.victim"),
        (["x", "a.b"], "x.%22a.b%22"),
        (["x.a", "b"], "%22x.a%22.b"),
        ([".hidden"], "%22.hidden%22"),
        (["_staging"], "%5Fstaging"),
        (["a/b\\c:d*e?f"], "a%2Fb%5Cc%3Ad%2Ae%3Ff"),
        (["50%"], "50%25"),
        (["tab\tname"], "tab%09name"),
        (["ends."], "%22ends.%22"),
        (["ends "], "ends%20"),
        ([""], "%22%22"),
    ],
)
def test_folder_names(parts, folder):
    assert table_folder(qualify(parts)) == folder
    assert folder_table(folder) == qualify(parts)


def test_a_long_name_is_shortened_with_a_stable_hash():
    name = qualify(["db", "t" * 300])
    folder = table_folder(name)
    assert len(folder.encode("utf-8")) <= MAX_FOLDER_BYTES
    assert folder.startswith("db.tttt") and folder[-17] == "~"
    assert folder == table_folder(name)
    assert table_folder(qualify(["db", "t" * 299 + "u"])) != folder
    assert folder_table(folder) is None
    # Multi-byte characters are never cut in two.
    wide = table_folder(qualify(["库" * 200]))
    assert len(wide.encode("utf-8")) <= MAX_FOLDER_BYTES and wide.startswith("库" * 66 + "~")


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ('a"b', "table name 'a\"b': a '\"' may only open a quoted part"),
        ('"ab', "table name '\"ab': the quoted part opening at character 1 is not closed"),
        ('"a"b', "table name '\"a\"b': a quoted part must be followed by '.' or the end, found 'b'"),
    ],
)
def test_unreadable_names_are_refused(name, error):
    with pytest.raises(TableNameError, match="^" + error.replace("(", r"\(").replace(".", r"\.")):
        split_qualified(name)


def test_names_users_write_match_by_whole_parts():
    assert name_readings("x.a.b") == (("x", "a", "b"), ("x", "a.b"), ("x.a", "b"), ("x.a.b",))
    assert matching_reading("customers", "inventory.customers") == ("customers",)
    assert matching_reading("inventory.customers", "inventory.customers") == ("inventory", "customers")
    assert matching_reading("tomers", "inventory.customers") is None
    assert matching_reading("b", 'x."a.b"') is None
    assert matching_reading("a.b", 'x."a.b"') == ("a.b",)
    assert matching_reading('x."a.b"', '"x.a".b') is None


def test_a_dotted_name_that_means_two_tables_is_refused_with_their_parts():
    tables = ['x."a.b"', '"x.a".b', "y.b"]
    with pytest.raises(TableNameError) as caught:
        check_unambiguous(["x.a.b"], tables, "--table")
    assert str(caught.value) == (
        "--table 'x.a.b' is ambiguous: it names tables whose parts differ: "
        "['x', 'a.b'] (write x.\"a.b\": x.\"a.b\"); ['x.a', 'b'] (write \"x.a\".b: \"x.a\".b). "
        "Quote the part that holds a dot, as shown."
    )
    check_unambiguous(["b", 'x."a.b"', "customers"], tables, "--table")  # a bare name may name several


def test_lookup_prefers_the_exact_name_then_the_most_parts():
    entries = {"b": 1, "x.b": 2, "y.x.b": 3}
    assert lookup(entries, "y.x.b") == 3
    assert lookup(entries, "z.x.b") == 2
    assert lookup(entries, "z.b") == 1
    assert lookup(entries, 'z."x.b"') == 2  # a plain dotted name may mean one part holding the dot
    assert lookup({"b": 1}, 'z."x.b"') is None
    assert lookup({"x.a.b": 9}, 'x."a.b"') == 9
