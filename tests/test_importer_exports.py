"""Writers' exports imported: Substack, Medium, WordPress, Ghost and X, each from its real layout.

The exports are `tests/fixtures/exports/` (see its README for where each layout is documented),
zipped here as their services zip them, and imported with the word-hashing test embedder: which
posts become bits with which title, URL and description, what is left out unless asked for, what
private data is never read, how a damaged post is named while the others are imported, and that a
re-run after one new post embeds only that post. `test_importer_exports_e2e.py` runs the command
with the real model and asks a real host.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
from export_support import BASE_URLS, EXPORTS, FIXTURES, LEFT_OUT, NEVER, build_export, zip_folder
from importer_support import HashingEmbedder

from host.importer import ImportOptions, cli, import_library
from host.importer.errors import ImporterError
from host.importer.exports.wordpress import autop, strip_shortcodes
from host.importer.exports.x import tweet_text
from host.importer.sources import find_sources


def run_import(source: Path, out: Path, embedder: Any = None, **options: Any) -> Any:
    options.setdefault("cache", out.with_name(out.name + ".cache.sqlite"))
    return import_library([source], out, embedder or HashingEmbedder(), ImportOptions(**options), say=lambda line: None)


def infos(out: Path) -> list[tuple[str, str, str | None]]:
    return [(bit["info"]["url"], bit["info"]["title"], bit["info"].get("description"))
            for bit in json.loads(out.read_text())["bits"]]


def texts(out: Path) -> str:
    return "\n".join(bit["text"] for bit in json.loads(out.read_text())["bits"])


# What each export's published writing becomes: its bits' URL, title and description, in order.
EXPECTED = {
    "substack": [
        ("https://theharbourlog.substack.com/p/seal-census", "The seal census", "What the spring count found"),
        ("https://theharbourlog.substack.com/p/lighthouse-lamps", "Lamps, oil and patience",
         "How the old light is kept burning"),
        ("https://theharbourlog.substack.com/p/about", "About The Harbour Log", None),
    ],
    "medium": [("https://medium.com/@ada.quill/why-copper-kettles-sing-3f2a9c1b7d4e", "Why Copper Kettles Sing",
                "A short physics of the whistle")],
    "wordpress": [
        ("https://gardenpath.example/2024/02/forcing-rhubarb/", "Forcing rhubarb", "Early rhubarb, the old way."),
        ("https://gardenpath.example/2023/04/blackbirds-holly/", "Blackbirds & holly", None),
        ("https://gardenpath.example/about/", "About the garden", None),
    ],
    "ghost": [
        ("https://quietcoast.example/night-ferry/", "The night ferry", "Crossing after dark."),
        ("https://quietcoast.example/puffin-burrows/", "Puffin burrows", "Where the puffins live."),
        ("https://quietcoast.example/about/", "About The Quiet Coast", None),
    ],
    "x": [
        ("https://x.com/tidepoolnotes/status/1760000000000000001",
         "How we counted the crabs in the Marlow rock pools, a thread \U0001f9f5", None),
        ("https://x.com/tidepoolnotes/status/1770000000000000000",
         "Our rock pool guide for beginners is online: https://tidepool.example/guide &\u2026", None),
        ("https://x.com/tidepoolnotes/status/1780000000000000000",
         "Beadlet anemones close up like red gumdrops when the tide goes out", None),
    ],
}
SUMMARIES = {
    "substack": "1 draft skipped (--include-drafts); 1 post for paying or signed-in readers skipped (import them "
                "with --access-tag)",
    "medium": "1 draft skipped (--include-drafts); 1 response skipped (--include-replies)",
    "wordpress": "1 draft skipped (--include-drafts); 1 post for paying or signed-in readers skipped",
    "ghost": "1 draft skipped (--include-drafts); 1 post for paying or signed-in readers skipped",
    "x": "1 reply to others skipped (--include-replies); 1 retweet skipped (--include-retweets)",
}


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path, Any]]:
    """Each export imported once with the default options: (export, library, report)."""
    done = {}
    for name in EXPORTS:
        folder = tmp_path_factory.mktemp(name)
        export = build_export(name, folder)
        out = folder / "library.json"
        done[name] = (export, out, run_import(export, out, base_url=BASE_URLS.get(name)))
    return done


@pytest.mark.parametrize("name", EXPORTS)
def test_an_export_is_recognised_by_its_layout_and_split_into_its_posts(name, tmp_path):
    export = build_export(name, tmp_path)
    found = find_sources([export])
    assert {source.kind for source in found.files} == {name}
    assert all(source.path == export and source.member for source in found.files)


@pytest.mark.parametrize("name", EXPORTS)
def test_each_published_post_is_a_bit_with_its_title_url_and_description(name, imported):
    _, out, report = imported[name]
    assert infos(out) == EXPECTED[name]
    assert report.failed == [] and report.files_read == len(EXPECTED[name])


@pytest.mark.parametrize("name", EXPORTS)
def test_the_summary_says_what_was_left_out_and_how_to_import_it(name, imported):
    assert SUMMARIES[name] in imported[name][2].summary()[0]


@pytest.mark.parametrize("name", EXPORTS)
def test_drafts_private_posts_replies_and_private_data_are_never_imported_by_default(name, imported):
    _, out, _ = imported[name]
    library = out.read_text()
    for export, _, sentence in LEFT_OUT:
        assert export != name or sentence not in library
    for secret in NEVER:
        assert secret not in texts(out), secret
    assert "never.imported" not in library


@pytest.mark.parametrize(("name", "option", "sentence"), LEFT_OUT)
def test_what_is_left_out_is_imported_when_asked_for(name, option, sentence, tmp_path):
    export = build_export(name, tmp_path)
    asked = {"access_tag": "subscribers"} if option == "access_tag" else {option: True}
    run_import(export, tmp_path / "out.json", base_url=BASE_URLS.get(name), **asked)
    assert sentence in texts(tmp_path / "out.json")


def test_the_text_is_the_posts_own_without_the_services_furniture(imported):
    substack, wordpress = texts(imported["substack"][1]), texts(imported["wordpress"][1])
    assert "Subscribe" not in substack and "Share" not in substack
    assert "The lamp room after cleaning." in substack  # a figure's caption is the writer's text
    assert "[caption" not in wordpress and "[gallery" not in wordpress and "wp:paragraph" not in wordpress
    assert "The forcing pots in February" in wordpress and "a foot long [sic], twisting" in wordpress
    # the classic editor's blank lines are paragraphs; its single line breaks stay lines
    assert "June.\n\nThe hen sits for a fortnight.\nThe cock sings" in wordpress
    medium = texts(imported["medium"][1])
    assert medium.count("Why Copper Kettles Sing") == 0  # the title the body repeats is the bit's title already


def test_ghost_posts_are_read_from_html_lexical_or_mobiledoc(imported):
    ghost = texts(imported["ghost"][1])
    assert "Buy tickets aboard; the purser takes cash only." in ghost  # html
    assert "Occupied burrows have fresh droppings at the mouth." in ghost  # lexical, two text nodes joined
    assert "Keep to the marked path in June." in ghost and "A puffin at the burrow" in ghost  # lexical cards
    assert "Two islanders and a borrowed typewriter." in ghost and "- tides\n- birds" in ghost  # mobiledoc


def test_an_x_thread_is_one_bit_in_order_with_links_expanded_and_media_links_dropped(imported):
    x = json.loads(imported["x"][1].read_text())["bits"]
    assert x[0]["text"] == ("How we counted the crabs in the Marlow rock pools, a thread \U0001f9f5\n\nWe used a quadrat "
                            "of string, one metre square, laid on the rock at low tide.\n\nTotal: 312 shore crabs and "
                            "one very surprised blenny. Thank you, volunteers!")
    assert x[1]["text"] == "Our rock pool guide for beginners is online: https://tidepool.example/guide & free to print"
    assert x[2]["text"] == "Beadlet anemones close up like red gumdrops when the tide goes out"


def test_a_reply_is_imported_without_the_names_it_starts_with():
    tweet = {"full_text": "@oceanfriend @crabwatch Velvet crabs, I think.", "display_text_range": ["24", "46"]}
    assert tweet_text(tweet) == "Velvet crabs, I think."


@pytest.mark.parametrize(("text", "expected"), [
    ('[caption id="attachment_5" width="300"]<img src="a.jpg"> A fox[/caption]', '<img src="a.jpg"> A fox'),
    ('Before [gallery ids="1,2"] after', "Before  after"),
    ("[embed]https://youtube.example/v/1[/embed]Text", "Text"),
    ("[pullquote]Quoted[/pullquote]", "Quoted"),
    ("A foot long [sic], see [1] and [Update 2024: new]", "A foot long [sic], see [1] and [Update 2024: new]"),
])
def test_shortcodes_go_and_the_text_they_wrap_stays(text, expected):
    assert strip_shortcodes(text) == expected


def test_classic_editor_content_gets_its_paragraphs():
    assert autop("One\ntwo\n\n<h3>Three</h3>\n\nFour") == "<p>One<br>\ntwo</p>\n<h3>Three</h3>\n<p>Four</p>"


# ---- found by layout, in zips and folders, or by --format ----------------------------------------


def test_unzipped_exports_in_a_folder_are_read_as_exports_not_as_pages(tmp_path):
    for name in EXPORTS:
        build_export(name, tmp_path / "archive", zipped=False)
    (tmp_path / "archive" / "notes.md").write_text("# Notes\n\nA note of my own.")
    found = find_sources([tmp_path / "archive"])
    kinds = {source.relative.split("/", 1)[0]: source.kind for source in found.files}
    assert kinds == {"substack-export": "substack", "medium-export": "medium", "wordpress.xml": "wordpress",
                     "ghost.json": "ghost", "x-export": "x", "notes.md": "markdown"}
    assert found.skipped_by_suffix == {} and found.not_feeds == 0  # posts.csv, profile.html, tweets.js: not read


def test_an_unzipped_export_named_as_a_source_is_read_as_the_export(tmp_path):
    export = build_export("medium", tmp_path, zipped=False)
    found = find_sources([export])
    assert [(source.relative, source.member) for source in found.files] == [
        ("medium-export/posts/2024-03-02_Why-Copper-Kettles-Sing-3f2a9c1b7d4e.html",
         "posts/2024-03-02_Why-Copper-Kettles-Sing-3f2a9c1b7d4e.html")]


def test_a_zip_of_the_unzipped_folder_is_read_from_inside_its_top_folder(tmp_path):
    nested = tmp_path / "theharbourlog"
    build_export("substack", nested, zipped=False)
    zip_folder(nested, tmp_path / "rezipped.zip")  # members are substack-export/posts.csv, ...
    found = find_sources([tmp_path / "rezipped.zip"])
    assert [source.member for source in found.files] == [
        "posts/101.seal-census.html", "posts/102.lighthouse-lamps.html", "posts/105.about.html"]


def test_format_names_the_export_whatever_the_file_is_called(tmp_path):
    export = build_export("ghost", tmp_path).rename(tmp_path / "backup-2024.txt")
    assert {source.kind for source in find_sources([export], format="ghost").files} == {"ghost"}
    assert [source.kind for source in find_sources([export]).files] == ["text"]


def test_format_for_an_export_that_is_not_one_fails_that_source_in_one_line(tmp_path):
    notes = tmp_path / "notes.zip"
    with zipfile.ZipFile(notes, "w") as archive:
        archive.writestr("notes.md", "# Notes")
    found = find_sources([notes], format="substack")
    assert found.files == [] and found.failed == [f"{notes}: posts.csv: not in the export"]


def test_a_wordpress_export_is_not_taken_for_a_feed_and_a_feed_not_for_an_export(tmp_path):
    build_export("wordpress", tmp_path)
    (tmp_path / "feed.xml").write_text('<?xml version="1.0"?><rss version="2.0"><channel><title>T</title>'
                                      "<item><title>A</title><link>https://x.example/a</link>"
                                      "<description>Hello</description></item></channel></rss>")
    kinds = {source.relative.split("/", 1)[0]: source.kind for source in find_sources([tmp_path]).files}
    assert kinds == {"feed.xml": "feed", "wordpress.xml": "wordpress"}


# ---- a damaged post is named; the others are imported ---------------------------------------------


def damage_member(archive: Path, member: str) -> None:
    """Flip bytes in the middle of a member's compressed data, as a broken download would."""
    with zipfile.ZipFile(archive) as readable:
        info = readable.getinfo(member)
    data = bytearray(archive.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    for offset in range(start + info.compress_size // 3, start + info.compress_size // 3 + 8):
        data[offset] ^= 0x5A
    archive.write_bytes(bytes(data))


def test_a_damaged_zip_member_is_named_in_one_line_and_the_other_posts_imported(tmp_path):
    export = build_export("substack", tmp_path)
    damage_member(export, "posts/102.lighthouse-lamps.html")
    report = run_import(export, tmp_path / "out.json", base_url=BASE_URLS["substack"])
    assert len(report.failed) == 1
    assert report.failed[0].startswith(f"{export}: posts/102.lighthouse-lamps.html: damaged in the zip (")
    assert "\n" not in report.failed[0]
    assert [url for url, _, _ in infos(tmp_path / "out.json")] == [
        "https://theharbourlog.substack.com/p/seal-census", "https://theharbourlog.substack.com/p/about"]


def test_an_undecodable_page_is_named_and_the_other_posts_imported(tmp_path):
    folder = build_export("medium", tmp_path / "unzipped", zipped=False)
    page = folder / "posts" / "2024-05-01_Second-Post-1234567890ab.html"
    page.write_bytes((folder / "posts" / "2024-03-02_Why-Copper-Kettles-Sing-3f2a9c1b7d4e.html").read_bytes()
                     .replace(b"narrow brass reed", b"narrow \xff brass reed").replace(b"3f2a9c1b7d4e", b"1234567890ab"))
    export = zip_folder(folder, tmp_path / "medium.zip")
    report = run_import(export, tmp_path / "out.json")
    where = page.read_bytes().index(b"\xff")
    assert report.failed == [f"{export}: posts/2024-05-01_Second-Post-1234567890ab.html: not UTF-8 text "
                             f"(byte {where:,} is 0xff)"]
    assert infos(tmp_path / "out.json") == EXPECTED["medium"]


def test_a_ghost_post_whose_lexical_is_broken_is_named_and_the_others_imported(tmp_path):
    export = json.loads((FIXTURES / "ghost.json").read_text())
    export["db"][0]["data"]["posts"][1]["lexical"] = '{"root": {"children": ['
    (tmp_path / "ghost.json").write_text(json.dumps(export))
    report = run_import(tmp_path / "ghost.json", tmp_path / "out.json", base_url=BASE_URLS["ghost"])
    assert len(report.failed) == 1 and report.failed[0].startswith(
        f"{tmp_path / 'ghost.json'}: post puffin-burrows: lexical: not valid JSON (")
    assert [url for url, _, _ in infos(tmp_path / "out.json")] == [
        "https://quietcoast.example/night-ferry/", "https://quietcoast.example/about/"]


def test_a_post_listed_without_its_page_is_named(tmp_path):
    folder = build_export("substack", tmp_path / "unzipped", zipped=False)
    (folder / "posts" / "105.about.html").unlink()
    report = run_import(folder, tmp_path / "out.json", base_url=BASE_URLS["substack"])
    assert report.failed == [f"{folder}: posts/105.about.html: not in the export (posts.csv line 6)"]
    assert len(infos(tmp_path / "out.json")) == 2


def test_an_export_that_cannot_be_read_at_all_writes_nothing(tmp_path):
    broken = (FIXTURES / "wordpress.xml").read_text().replace("</item>", "</itme>", 1)
    (tmp_path / "wordpress.xml").write_text(broken)
    out = tmp_path / "out.json"
    out.write_text("old")
    with pytest.raises(ImporterError, match=r"nothing to import from .*wordpress.xml: no file could be read"):
        import_library([tmp_path / "wordpress.xml"], out, HashingEmbedder(), ImportOptions(),
                       say=(said := []).append)
    assert said == [f"error: {tmp_path / 'wordpress.xml'}: not well-formed XML (mismatched tag: line 93, column 3)"]
    assert out.read_text() == "old"


def test_a_wordpress_export_with_entities_is_refused(tmp_path):
    bomb = (FIXTURES / "wordpress.xml").read_text().replace(
        '<?xml version="1.0" encoding="UTF-8" ?>',
        '<?xml version="1.0" encoding="UTF-8" ?>\n<!DOCTYPE rss [<!ENTITY lol "lol">]>')
    (tmp_path / "wordpress.xml").write_text(bomb.replace("<title>The Garden Path</title>", "<title>&lol;</title>"))
    found = find_sources([tmp_path / "wordpress.xml"])
    assert found.files == [] and len(found.failed) == 1 and "refused: EntitiesForbidden" in found.failed[0]


# ---- incremental ------------------------------------------------------------------------------------


def test_a_rerun_after_one_new_post_reads_and_embeds_only_that_post(tmp_path):
    folder = build_export("substack", tmp_path / "unzipped", zipped=False)
    export = zip_folder(folder, tmp_path / "substack.zip")
    out = tmp_path / "out.json"
    run_import(export, out, base_url=BASE_URLS["substack"])

    with (folder / "posts.csv").open("a") as csv:
        csv.write("106.storm-petrels,2024-05-19T20:00:00.000Z,true,,,newsletter,everyone,Storm petrels,At dusk,\n")
    (folder / "posts" / "106.storm-petrels.html").write_text("<p>Storm petrels came ashore at dusk to the old wall.</p>")
    export = zip_folder(folder, export)
    embedder = HashingEmbedder()
    report = run_import(export, out, embedder, base_url=BASE_URLS["substack"])

    assert embedder.embedded == ["Storm petrels came ashore at dusk to the old wall."]
    assert set(embedder.counted) == {"Storm petrels came ashore at dusk to the old wall."}  # the others: cached
    assert (report.files_read, report.files_unchanged, report.embedded, report.reused) == (4, 3, 1, 3)
    assert infos(out)[-1] == ("https://theharbourlog.substack.com/p/storm-petrels", "Storm petrels", "At dusk")


def test_a_new_tweet_in_a_thread_embeds_only_that_thread_again(tmp_path):
    folder = build_export("x", tmp_path / "unzipped", zipped=False)
    out = tmp_path / "out.json"
    run_import(folder, out)
    tweets = (folder / "data" / "tweets.js").read_text()
    prefix, _, array = tweets.partition("=")
    entries = json.loads(array)
    entries.append({"tweet": {"id_str": "1760000000000000009", "full_text": "Next count: the autumn spring tide.",
                              "in_reply_to_status_id_str": "1760000000000000007",
                              "in_reply_to_user_id_str": "1111111111", "created_at": "Tue Feb 20 10:20:00 +0000 2024"}})
    (folder / "data" / "tweets.js").write_text(prefix + "= " + json.dumps(entries))
    embedder = HashingEmbedder()
    report = run_import(folder, out, embedder)
    assert len(embedder.embedded) == 1 and embedder.embedded[0].endswith("Next count: the autumn spring tide.")
    assert (report.files_unchanged, report.embedded, report.reused) == (2, 1, 2)


def test_a_medium_export_without_its_profile_is_still_known_by_its_pages(tmp_path):
    folder = build_export("medium", tmp_path / "unzipped", zipped=False)
    for path in [folder / "profile" / "profile.html", folder / "README.html"]:
        path.unlink()
    assert {source.kind for source in find_sources([zip_folder(folder, tmp_path / "m.zip")]).files} == {"medium"}
    assert {source.kind for source in find_sources([folder]).files} == {"medium"}


def test_a_site_folder_with_posts_is_walked_not_taken_for_an_export(tmp_path):
    (tmp_path / "site" / "posts").mkdir(parents=True)
    (tmp_path / "site" / "posts" / "hello.html").write_text("<title>Hello</title><p>My own page.</p>")
    (tmp_path / "site" / "posts.csv").write_text("title,date\nHello,2024-01-01\n")
    found = find_sources([tmp_path / "site"])
    assert [(source.relative, source.kind) for source in found.files] == [("posts/hello.html", "html")]


# ---- on the command line ----------------------------------------------------------------------------


def test_the_command_names_a_damaged_post_exits_1_and_writes_the_others(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    export = build_export("substack", tmp_path).rename(tmp_path / "backup.bin")  # a name that says nothing
    damage_member(export, "posts/102.lighthouse-lamps.html")
    code = cli.main(["backup.bin", "--format", "substack", "--out", "harbour.json", "--base-url",
                     BASE_URLS["substack"]], open_embedder=lambda *args, **how: HashingEmbedder())
    err = capsys.readouterr().err.splitlines()
    assert code == 1
    assert err[0].startswith("error: backup.bin: posts/102.lighthouse-lamps.html: damaged in the zip (")
    assert err[1] == ("read 2 files, 2 documents; 1 draft skipped (--include-drafts); 1 post for paying or signed-in "
                      "readers skipped (import them with --access-tag); 1 failed (see above)")
    assert [url for url, _, _ in infos(tmp_path / "harbour.json")] == [
        "https://theharbourlog.substack.com/p/seal-census", "https://theharbourlog.substack.com/p/about"]


def test_an_access_tagged_import_takes_the_paid_posts(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    build_export("substack", tmp_path)
    code = cli.main(["substack-export.zip", "--out", "harbour.json", "--access-tag", "paid", "--base-url",
                     BASE_URLS["substack"]], open_embedder=lambda *args, **how: HashingEmbedder())
    assert code == 0
    library = tmp_path / "libraries" / "access" / "paid" / "harbour.json"
    assert "Paid subscribers get the tide tables for Gull Rock" in texts(library)
    assert "1 draft skipped" in capsys.readouterr().err
