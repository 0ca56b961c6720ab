"""`validate` names every problem of every file, and says so when a path holds no library file.

`library_problems` runs the same checks as `parse_library`, so its first line is always the
message `serve` refuses the file with; the rest are what `parse_library` stops before.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from librarian import TEST_MODEL, b64, make_library, unit_vectors, write_library

from host.cli.validate import validate_command, validate_paths
from host.library.format import check_library, library_problems, parse_library
from host.library.problems import LibraryFormatError


def broken_in_three_places() -> dict[str, Any]:
    library = make_library(unit_vectors(4))
    library["sort"] = "newest"
    del library["bits"][1]["text"]
    library["bits"][1]["token_count"] = -1
    library["bits"][3]["embedding"] = b64(np.ones(7))
    return library


def test_every_problem_is_listed_in_file_order():
    assert library_problems(broken_in_three_places()) == [
        "sort: expected one of any, similarity, manual, random, got 'newest'",
        "bits[1].text: must be a string, got None",
        "bits[1].token_count: must be an integer from 0 to 2147483647, got -1",
        f"bits[3].embedding: has 7 dimensions, expected 8 for {TEST_MODEL}",
    ]


def test_a_valid_library_has_no_problems_and_checks_into_the_same_library():
    library = make_library(unit_vectors(3))
    parsed, problems = check_library(library)
    assert problems == [] and library_problems(library) == []
    assert parsed is not None and parsed.ids == parse_library(library).ids


def test_problems_of_info_are_each_named():
    library = make_library(unit_vectors(2))
    library["bits"][0]["info"] = {"url": "", "title": 3, "description": ["x"]}
    assert library_problems(library) == [
        "bits[0].info.url: must be a non-empty string, got ''",
        "bits[0].info.title: must be a string, got 3",
        "bits[0].info.description: must be a string, got ['x']",
    ]


def test_a_bad_version_is_reported_and_the_rest_still_checked():
    library = make_library(unit_vectors(2), version=None)
    library["bits"][1]["token_count"] = "7"
    assert library_problems(library) == [
        "version: expected 0 or 1, got None",
        "bits[1].token_count: must be an integer from 0 to 2147483647, got '7'",
    ]


def test_nothing_below_a_top_level_that_cannot_hold_bits_is_invented():
    assert library_problems([1]) == ["a library must be a JSON object, got list"]
    assert library_problems({"version": 1, "embedding_model": "m", "bits": {}}) == ["bits: must be a list"]


def with_change(change: str) -> Any:
    """Each kind of problem `parse_library` knows, applied to an otherwise good library."""
    library: Any = make_library(unit_vectors(3))
    bits = library["bits"]
    if change == "not an object":
        return "library"
    edits = {
        "version": lambda: library.update(version=2),
        "model": lambda: library.update(embedding_model=""),
        "omit": lambda: library.update(omit="embedding"),
        "omit key": lambda: library.update(omit="embeding"),
        "details": lambda: library.update(details=[]),
        "bit kind": lambda: bits.__setitem__(1, 5),
        "unknown key": lambda: bits[2].update(embeddings="x", zzz=1),
        "info": lambda: bits[0].update(info=None),
        "base64": lambda: bits[1].update(embedding="!!"),
        "nan": lambda: bits[1].update(embedding=b64([np.nan] * 8)),
        "magnitude": lambda: bits[1].update(embedding=b64([1e7] * 8)),
        "huge token count": lambda: bits[0].update(token_count=2**31),
        "access tag": lambda: bits[2].update(access_tag=""),
        "version 0": lambda: library.update(version=0),
    }
    edits[change]()
    return library


@pytest.mark.parametrize("change", ["not an object", "version", "model", "omit", "omit key", "details", "bit kind",
                                    "unknown key", "info", "base64", "nan", "magnitude", "huge token count",
                                    "access tag", "version 0"])
def test_the_first_problem_is_exactly_what_parse_library_says(change):
    with pytest.raises(LibraryFormatError) as refused:
        parse_library(with_change(change))
    assert library_problems(with_change(change))[0] == str(refused.value)


# ---- the command ----------------------------------------------------------------------------


def run_validate(*paths: Path) -> tuple[int, list[str]]:
    lines: list[str] = []
    return validate_paths(paths, say=lines.append), lines


def test_validate_prints_every_problem_of_every_file(tmp_path):
    write_library(tmp_path / "libraries" / "a.json", broken_in_three_places())
    second = make_library(unit_vectors(2))
    second["bits"][0]["info"] = {}
    write_library(tmp_path / "libraries" / "b.json", second)
    write_library(tmp_path / "libraries" / "good.json", make_library(unit_vectors(2)))

    code, lines = run_validate(tmp_path / "libraries")

    a, b, good = (tmp_path / "libraries" / name for name in ("a.json", "b.json", "good.json"))
    assert code == 1
    assert lines == [
        f"{a}: sort: expected one of any, similarity, manual, random, got 'newest'",
        f"{a}: bits[1].text: must be a string, got None",
        f"{a}: bits[1].token_count: must be an integer from 0 to 2147483647, got -1",
        f"{a}: bits[3].embedding: has 7 dimensions, expected 8 for {TEST_MODEL}",
        f"{b}: bits[0].info.url: must be a non-empty string, got None",
        f"{good}: ok, 2 bits, {TEST_MODEL}, dimension 8",
    ]


@pytest.mark.parametrize("contents", [[], ["notes.txt", ".hidden.json", "keys.SECRET.json"]])
def test_a_folder_without_library_files_is_a_problem(tmp_path, contents):
    folder = tmp_path / "libraries"
    folder.mkdir()
    for name in contents:
        (folder / name).write_text("{}")

    code, lines = run_validate(folder)

    assert code == 1
    assert lines == [f"{folder}: holds no library file (a library is a .json file, not hidden, "
                     "without .SECRET. in its name)"]


def test_missing_paths_and_unreadable_json_are_named(tmp_path):
    (tmp_path / "stray.json").write_text("{oops")
    code, lines = run_validate(tmp_path / "nowhere", tmp_path / "stray.json")
    assert code == 1
    assert lines[0] == f"{tmp_path / 'nowhere'}: does not exist"
    assert lines[1].startswith(f"{tmp_path / 'stray.json'}: not valid JSON: ")


def test_the_folder_access_tag_applies_when_validating(tmp_path):
    library = make_library(unit_vectors(2))
    library["bits"][0]["access_tag"] = ""  # the folder's tag overrides it, as serve does
    write_library(tmp_path / "access" / "staff" / "plans.json", library)
    assert run_validate(tmp_path)[0] == 0


def test_validate_command_takes_the_parsed_arguments(tmp_path, capsys):
    write_library(tmp_path / "good.json", make_library(unit_vectors(2)))
    code = validate_command(argparse.Namespace(paths=[tmp_path / "good.json"], max_library_bytes=100))
    assert code == 1 and "over the 100-byte limit" in capsys.readouterr().out
