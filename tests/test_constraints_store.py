"""The text index through the real store: compiled with the library, memory-mapped back, checked."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from constraint_reference import matches
from librarian import TEST_MODEL, b64, unit_vectors, write_library

from host.catalog.generations import load_catalog
from host.catalog.plan import SEGMENTS, read_plan
from host.constraints import parse_constraint, parse_metadata_condition
from host.constraints.text_index import BLOB, LAYOUT
from host.search.model_text import constraint_mask
from host.store.compiled import STORE_FORMAT

TEXTS = [
    ("In the beginning God created the heaven and the earth.", "Genesis 1", "https://ex.org/gen/1"),
    ("And the earth was without form, and void.", "Genesis 2", "https://ex.org/gen/2"),
    ("\uff34\uff48\uff45 LORD is my shepherd; I shall not want.", "Psalm 23", "https://ex.org/ps/23"),
    ("Blessed are the meek: for they shall inherit the earth.", "Matthew 5", "https://ex.org/mt/5"),
]
QUERIES = ['earth', '"the earth"', 'title:genesis', 'url:ex.org/gen', 'the NOT earth', 'sh*', '"the lord"',
           'library:psalms', 'library:gospels NOT title:psalm', '(heaven OR shepherd) NOT "the earth"']


def library_file(texts: list[tuple[str, str, str]], first: int = 0) -> dict:
    vectors = unit_vectors(len(texts), seed=first)
    bits = [{"text": text, "embedding": b64(vector), "token_count": 10,
             "info": {"url": url, "title": title, "description": f"{first + row}"}}
            for row, ((text, title, url), vector) in enumerate(zip(texts, vectors, strict=True))]
    return {"version": 1, "embedding_model": TEST_MODEL, "bits": bits}


@pytest.fixture
def catalog(tmp_path: Path):
    write_library(tmp_path / "libraries" / "psalms.json", library_file(TEXTS[:2]))
    write_library(tmp_path / "libraries" / "gospels.json", library_file(TEXTS[2:], first=2))
    loaded = load_catalog(tmp_path / "libraries", cache_dir=tmp_path / "compiled")
    assert not loaded.problems
    return loaded


def records_of(catalog) -> list[tuple[dict, str]]:
    """Every row of the model's index in order: its record and its library's name."""
    index = catalog.models[TEST_MODEL]
    return [(index.locate(row)[0].record(index.locate(row)[1]), index.library_of(row).name)
            for row in range(index.bit_count)]


def test_the_text_index_is_written_with_the_library_and_opened_memory_mapped(catalog, tmp_path: Path) -> None:
    folder = tmp_path / "compiled" / SEGMENTS / read_plan(tmp_path / "compiled")["psalms"].segment
    assert (folder / BLOB).is_file() and (folder / LAYOUT).is_file()
    assert json.loads((folder / "meta.json").read_text())["store_format"] == STORE_FORMAT
    index = catalog.library("psalms").segment.text_index
    assert index is not None and index.rows == 4  # the two small files share a segment
    for array in (index.words["text"].positions, index.values["title"].value_ids):
        while array is not None and not isinstance(array, np.memmap):
            array = array.base
        assert isinstance(array, np.memmap)  # a view of the file's map, not a copy


@pytest.mark.parametrize("query", QUERIES)
def test_constraints_over_compiled_libraries_are_the_reference_answer(catalog, query: str) -> None:
    node = parse_constraint(query)
    mask = constraint_mask(node, catalog.models[TEST_MODEL])
    assert mask.tolist() == [matches(node, record, name) for record, name in records_of(catalog)]


def test_metadata_conditions_over_compiled_libraries(catalog) -> None:
    condition = {"logic": "or", "conditions": [{"name": "description", "comparison_operator": "≥", "value": 3},
                                               {"name": "title", "comparison_operator": "start with", "value": "gen"}]}
    mask = constraint_mask(parse_metadata_condition(condition), catalog.models[TEST_MODEL])
    # gospels.json sorts first: its bits (descriptions "2", "3") are rows 0-1, then psalms' (Genesis) 2-3
    assert np.flatnonzero(mask).tolist() == [1, 2, 3]


@pytest.mark.parametrize("damage", [
    lambda folder: (folder / BLOB).write_bytes(b"short"),
    lambda folder: (folder / LAYOUT).unlink(),
    lambda folder: (folder / LAYOUT).write_text(json.dumps({"bytes": 0, "arrays": {}})),
])
def test_a_damaged_text_index_is_rebuilt_not_trusted(tmp_path: Path, damage) -> None:
    write_library(tmp_path / "lib.json", library_file(TEXTS))
    load_catalog(tmp_path)
    damage(tmp_path / ".compiled" / SEGMENTS / read_plan(tmp_path / ".compiled")["lib"].segment)
    said: list[str] = []
    index = load_catalog(tmp_path, progress=said.append).models[TEST_MODEL]
    assert said[0] == f"compiled lib: 4 bits, {TEST_MODEL}"  # a segment that cannot be opened is compiled again
    assert constraint_mask(parse_constraint('"the earth"'), index).tolist() == [True, True, False, True]
