"""The catalog: which files in `libraries/` are libraries, their names and access tags, and the
loaded set grouped by embedding model (SPEC §2)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from librarian import TEST_MODEL, make_library, unit_vectors, write_library

from host.catalog.generations import Catalog, LibraryFile, access_tag_for, discover, load_catalog
from host.library.embeddings import ADA_002


def distinct_library(site: str, count: int = 2, seed: int = 0, **top) -> dict:
    """`make_library`, with urls under https://<site>/ so two libraries share no bit."""
    library = make_library(unit_vectors(count, seed=seed), **top)
    for bit in library["bits"]:
        bit["info"]["url"] = bit["info"]["url"].replace("example.com", site)
    return library


def library_file(path: Path, count: int = 2, seed: int = 0, **top) -> Path:
    return write_library(path, distinct_library(f"{path.stem}.example", count, seed, **top))


def load(root: Path, **options) -> Catalog:
    return load_catalog(root, **options)


# ---- discovery ----------------------------------------------------------------------------------


@pytest.fixture
def publisher_folder(tmp_path: Path) -> Path:
    """A libraries/ folder as a publisher leaves it, with everything that is not a library."""
    root = tmp_path / "libraries"
    library_file(root / "essays.json")
    library_file(root / "team" / "notes.json")
    library_file(root / "access" / "unpublished" / "drafts.json")
    library_file(root / "access" / "staff" / "deep" / "plans.json")
    (root / "access.SECRET.json").write_text('{"keys": []}')
    (root / "team" / "old.SECRET.backup.json").write_text("{}")
    library_file(root / ".hidden" / "ignored.json")
    library_file(root / "team" / ".drafts" / "ignored.json")
    (root / "README.md").write_text("# not a library")
    (root / "essays.json.bak").write_text("{}")
    return root


def test_discovery_finds_library_json_files_only(publisher_folder):
    names = [entry.name for entry in discover(publisher_folder)]
    assert names == ["access/staff/deep/plans", "access/unpublished/drafts", "essays", "team/notes"]


def test_secret_files_are_never_libraries(publisher_folder):
    assert not any(".SECRET." in entry.path.name for entry in discover(publisher_folder))


def test_hidden_folders_are_skipped_including_the_compiled_cache(publisher_folder):
    load(publisher_folder)  # writes libraries/.compiled/...
    assert (publisher_folder / ".compiled").is_dir()
    assert len(discover(publisher_folder)) == 4


def test_names_are_relative_paths_without_json(publisher_folder):
    entry = next(entry for entry in discover(publisher_folder) if entry.name == "team/notes")
    assert entry == LibraryFile(publisher_folder / "team" / "notes.json", "team/notes", None)


def test_files_under_access_tag_folders_carry_the_tag(publisher_folder):
    tags = {entry.name: entry.access_tag for entry in discover(publisher_folder)}
    assert tags == {
        "access/staff/deep/plans": "staff",
        "access/unpublished/drafts": "unpublished",
        "essays": None,
        "team/notes": None,
    }


@pytest.mark.parametrize(
    ("relative", "tag"),
    [
        ("access/unpublished/drafts.json", "unpublished"),
        ("access/staff/2024/q1/plans.json", "staff"),
        ("access/outer/access/inner/x.json", "outer"),  # the folder after the *first* access
        ("team/access/secret/x.json", "secret"),
        ("accessible/x.json", None),
        ("essays.json", None),
    ],
)
def test_access_tag_is_the_folder_after_the_first_access_folder(relative, tag):
    assert access_tag_for(Path(relative)) == tag


def test_a_single_file_is_its_own_library(tmp_path):
    path = library_file(tmp_path / "one.json")
    assert discover(path) == [LibraryFile(path, "one", None)]


# ---- loading ------------------------------------------------------------------------------------


def test_every_bit_of_a_file_under_access_tag_is_tagged(publisher_folder):
    catalog = load(publisher_folder)

    drafts = catalog.library("access/unpublished/drafts")
    assert drafts is not None and drafts.tags == ("unpublished",)
    assert drafts.visible_bit_count(frozenset()) == 0
    assert drafts.visible_bit_count(frozenset({"unpublished"})) == 2
    assert catalog.library("essays").visible_bit_count(frozenset()) == 2


def test_malformed_json_is_reported_by_file_name_and_the_rest_still_load(tmp_path):
    root = tmp_path / "libraries"
    library_file(root / "good.json")
    (root / "stray.json").write_text('{"version": 1, "bits": [')
    library_file(root / "zeta.json", seed=1)

    catalog = load(root)

    assert [library.name for library in catalog.libraries] == ["good", "zeta"]
    assert len(catalog.problems) == 1
    assert catalog.problems[0].startswith(f"{root / 'stray.json'}: not valid JSON")


def test_a_file_breaking_the_format_is_reported_with_file_bit_and_field(tmp_path):
    root = tmp_path / "libraries"
    library = make_library(unit_vectors(3))
    library["bits"][2]["token_count"] = -1
    write_library(root / "bad.json", library)
    library_file(root / "good.json")

    catalog = load(root)

    assert catalog.problems == (f"{root / 'bad.json'}: bits[2].token_count: must be an integer from 0 to 2147483647, got -1",)
    assert [library.name for library in catalog.libraries] == ["good"]


def test_file_over_the_size_limit_is_a_problem_not_an_empty_library(tmp_path):
    root = tmp_path / "libraries"
    big = library_file(root / "big.json", count=20)
    library_file(root / "small.json", count=1)

    catalog = load(root, max_bytes=big.stat().st_size - 1)

    assert [library.name for library in catalog.libraries] == ["small"]
    assert catalog.problems[0].startswith(f"{big}: file is ") and "-byte limit" in catalog.problems[0]


def test_progress_says_compiled_then_opened(tmp_path):
    root = tmp_path / "libraries"
    library_file(root / "essays.json", count=3)
    said: list[str] = []

    load(root, progress=said.append)
    load(root, progress=said.append)

    assert said == [f"compiled essays: 3 bits, {TEST_MODEL}", "1 library in 1 segment, 1 compiled now",
                    "1 library in 1 segment, none compiled"]


def test_compiled_libraries_go_to_the_given_cache_dir(tmp_path):
    root = tmp_path / "libraries"
    library_file(root / "essays.json")

    load(root, cache_dir=tmp_path / "cache")

    [segment] = (tmp_path / "cache" / "segments").iterdir()
    assert (segment / "meta.json").exists() and (tmp_path / "cache" / "plan.json").exists()
    assert not (root / ".compiled").exists()


# ---- grouping by model --------------------------------------------------------------------------


def test_libraries_are_grouped_by_embedding_model(tmp_path):
    root = tmp_path / "libraries"
    library_file(root / "a.json", count=2)
    library_file(root / "b.json", count=3, seed=1)
    write_library(root / "c.json", make_library(unit_vectors(4, dimension=4), model="other:model-4"))

    catalog = load(root)

    assert set(catalog.models) == {TEST_MODEL, "other:model-4"}
    unit = catalog.models[TEST_MODEL]
    assert [library.name for library in unit.libraries] == ["a", "b"]
    assert unit.dimension == 8 and unit.bit_count == 5
    assert len(unit.segments) == 1 and unit.owners.tolist() == [0, 0, 1, 1, 1]  # small files share a segment
    assert catalog.models["other:model-4"].dimension == 4


def test_a_global_row_locates_its_library_and_row(tmp_path):
    root = tmp_path / "libraries"
    library_file(root / "a.json", count=2)
    library_file(root / "b.json", count=3, seed=1)
    index = load(root).models[TEST_MODEL]

    segment, row = index.locate(3)

    assert index.library_of(3).name == "b"
    assert segment.record(row)["info"]["url"] == "https://b.example/1"


def test_a_library_with_no_bits_is_loaded_but_answers_nothing(tmp_path):
    root = tmp_path / "libraries"
    write_library(root / "empty.json", {"version": 1, "embedding_model": "empty:model", "bits": []})

    catalog = load(root)

    assert catalog.library("empty").bit_count == 0
    assert "empty:model" not in catalog.models


def test_rows_are_all_visible_without_duplicates_or_restrictions(tmp_path):
    root = tmp_path / "libraries"
    library_file(root / "a.json")
    library_file(root / "b.json", seed=1)
    assert load(root).models[TEST_MODEL].visible_rows(frozenset()) is None


def test_restricted_rows_are_visible_only_with_their_tag(tmp_path):
    root = tmp_path / "libraries"
    library_file(root / "access" / "staff" / "plans.json", count=2)
    library_file(root / "public.json", count=2, seed=1)
    index = load(root).models[TEST_MODEL]

    assert index.visible_rows(frozenset()).tolist() == [False, False, True, True]
    assert index.visible_rows(frozenset({"unrelated"})).tolist() == [False, False, True, True]
    assert index.visible_rows(frozenset({"staff"})) is None


def test_the_same_bit_in_two_libraries_is_one_bit_and_the_first_wins(tmp_path):
    root = tmp_path / "libraries"
    first = distinct_library("a.example", 2)
    second = distinct_library("b.example", 3, seed=1)
    copy = dict(first["bits"][1], embedding=second["bits"][0]["embedding"], token_count=99,
                info={"url": first["bits"][1]["info"]["url"], "title": "the copy"})
    second["bits"][0] = copy
    write_library(root / "a.json", first)
    write_library(root / "b.json", second)

    index = load(root).models[TEST_MODEL]

    assert index.bit_count == 5
    visible = index.visible_rows(frozenset())
    assert visible.tolist() == [True, True, False, True, True]
    kept = [(index.library_of(row).name, index.locate(row)[0].record(index.locate(row)[1])["info"]["url"])
            for row in np.flatnonzero(visible)]
    assert kept == [("a", "https://a.example/0"), ("a", "https://a.example/1"), ("b", "https://b.example/1"),
                    ("b", "https://b.example/2")]


# ---- the real Polymath libraries ----------------------------------------------------------------


def test_real_polymath_libraries_load(fixtures_dir, tmp_path):
    catalog = load(fixtures_dir, cache_dir=tmp_path / "compiled")

    assert catalog.problems == ()
    counts = {library.name: library.bit_count for library in catalog.libraries}
    assert counts == {
        "polymath-v0-sample-content": 100,
        "polymath-v1-sample-library": 14,
        "polymath-v1-knowledge-string": 2,
    }
    assert set(catalog.models) == {ADA_002}
    assert catalog.models[ADA_002].dimension == 1536
    assert catalog.models[ADA_002].bit_count == 116


def test_real_version_0_library_keeps_its_content_order(fixtures_dir, tmp_path):
    source = fixtures_dir / "polymath-v0-sample-content.json"
    content = json.loads(source.read_text())["content"]

    catalog = load(source, cache_dir=tmp_path / "compiled")

    library = catalog.library("polymath-v0-sample-content")
    urls = [library.record(row)["info"]["url"] for row in range(library.bit_count)]
    assert urls == [bit["info"]["url"] for bit in content.values()]
    norms = np.linalg.norm(library.segment.embeddings[library.rows()], axis=1)
    assert np.allclose(norms, 1, atol=1e-3)  # real ada-002 vectors, decoded the right way round


def test_a_private_copy_listed_first_does_not_hide_the_public_copy(tmp_path):
    root = tmp_path / "libraries"
    shared = distinct_library("shared.example", 2)
    write_library(root / "access" / "staff" / "drafts.json", shared)  # sorts before "public.json"
    write_library(root / "public.json", shared)
    index = load(root).models[TEST_MODEL]

    assert index.visible_rows(frozenset()).tolist() == [False, False, True, True]
    assert index.visible_rows(frozenset({"staff"})).tolist() == [True, True, False, False]


def test_a_library_whose_dimension_differs_from_its_models_first_is_a_named_problem(tmp_path):
    root = tmp_path / "libraries"
    library_file(root / "a.json", count=2)
    write_library(root / "b.json", make_library(unit_vectors(2, dimension=4)))

    catalog = load(root)

    assert [library.name for library in catalog.libraries] == ["a"]
    assert len(catalog.problems) == 1
    assert "b.json: dimension 4 differs from 8 of a" in catalog.problems[0]


def test_a_private_copy_first_in_the_same_file_leaves_the_public_copy_to_anonymous_callers(tmp_path):
    root = tmp_path / "libraries"
    library = distinct_library("mixed.example", 2)
    library["bits"].insert(0, dict(library["bits"][1], access_tag="staff"))
    write_library(root / "mixed.json", library)
    index = load(root).models[TEST_MODEL]

    assert index.visible_rows(frozenset()).tolist() == [False, True, True]
    assert index.visible_rows(frozenset({"staff"})).tolist() == [True, True, False]
