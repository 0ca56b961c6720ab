"""Each reader on real file contents: what becomes the title, the sections, the description and the URL."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pypdf
import pytest
from importer_support import minimal_pdf

from host.importer.document import Document
from host.importer.errors import Draft, ImporterError
from host.importer.readers import fallback_title, feed, html, markdown, pdf, plain
from host.importer.sources import SourceFile, find_sources
from host.importer.urls import check_base_url, page_url, with_fragment


def outline(document: Document) -> list[tuple[tuple[str, ...], str | None, list[str]]]:
    return [(section.path, section.anchor, section.blocks) for section in document.sections]


# ---- Markdown ----------------------------------------------------------------------------------


def test_markdown_front_matter_gives_title_description_and_url():
    [document] = markdown.read(b"---\ntitle: My Post\ndescription: About it.\nurl: /2024/my-post/\n---\nBody.", "f")
    assert (document.title, document.description, document.own_url) == ("My Post", "About it.", "/2024/my-post/")
    assert outline(document) == [(("My Post",), None, ["Body."])]


def test_toml_front_matter_is_read_too():
    [document] = markdown.read(b'+++\ntitle = "Hugo post"\n+++\nBody.', "f")
    assert document.title == "Hugo post"


def test_yaml_front_matter_never_constructs_python_objects():
    unsafe = b"---\ntitle: !!python/object/apply:os.system ['echo owned']\n---\nBody."
    with pytest.raises(ImporterError, match="front matter: not valid YAML at line 2"):
        markdown.read(unsafe, "f")


@pytest.mark.parametrize("front_matter", [b"- a\n- b", b"just text"])
def test_front_matter_must_be_key_value_pairs(front_matter):
    with pytest.raises(ImporterError, match="front matter: expected key: value pairs"):
        markdown.read(b"---\n" + front_matter + b"\n---\nBody.", "f")


@pytest.mark.parametrize("flag", [b"draft: true", b"published: false"])
def test_drafts_are_not_read(flag):
    with pytest.raises(Draft):
        markdown.read(b"---\n" + flag + b"\n---\nNot yet.", "f")


def test_markdown_without_title_uses_its_first_h1_else_the_file_name():
    [with_h1] = markdown.read(b"# The Real Title\n\nText.\n\n## Part\n\nMore.", "file name")
    assert with_h1.title == "The Real Title"
    assert outline(with_h1) == [(("The Real Title",), None, ["Text."]),
                                (("The Real Title", "Part"), "part", ["More."])]
    [without] = markdown.read(b"Text first.\n\n# Later heading\n\nMore.", "file name")
    assert without.title == "file name"
    assert outline(without)[1][0] == ("file name", "Later heading")


def test_markdown_is_rendered_as_plain_text():
    source = (b"Some *emphasis*, a [link](https://x.example) and `code`.  \nHard break.\n\n"
              b"- one\n- two\n  1. nested\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
              b"```python\ndef f():\n    return 1\n```\n\n![a diagram](d.png)\n\n<div>raw <b>html</b></div>\n")
    [document] = markdown.read(source, "f")
    assert document.sections[0].blocks == [
        "Some emphasis, a link and code.\nHard break.",
        "- one\n- two\n  1. nested",
        "a | b\n1 | 2",
        "def f():\n    return 1",
        "a diagram",
        "raw html",
    ]


def test_markdown_heading_paths_follow_levels():
    source = b"# T\n\n## A\n\na\n\n### A1\n\na1\n\n## B\n\nb\n\n#### B-deep\n\nbd\n"
    [document] = markdown.read(source, "f")
    assert [(section.path, section.anchor) for section in document.sections] == [
        (("T", "A"), "a"), (("T", "A", "A1"), "a1"), (("T", "B"), "b"), (("T", "B", "B-deep"), "b-deep"),
    ]


# ---- HTML --------------------------------------------------------------------------------------


def test_html_title_description_canonical_and_sections():
    page = b"""<html><head><title>Post | Blog</title><meta name="Description" content=" A  post. ">
    <link rel="canonical" href="https://blog.example/post/"></head><body>
    <nav>Menu</nav><article><header><h1>Post</h1></header><p>Intro <em>text</em>.</p>
    <h2><a id="details"></a>Details \xc2\xb6</h2><p>One.<br>Two.</p><h3>No id</h3><p>Deep.</p>
    <pre>  keep
    indent</pre></article><footer>(c)</footer></body></html>"""
    [document] = html.read(page, "f")
    assert (document.title, document.description, document.own_url) == ("Post", "A post.", "https://blog.example/post/")
    assert outline(document) == [
        (("Post",), None, ["Intro text."]),
        (("Post", "Details"), "details", ["One.\nTwo."]),
        (("Post", "Details", "No id"), "details", ["Deep.", "  keep\n    indent"]),
    ]


def test_html_lists_and_tables_become_lines():
    page = b"<body><ul><li>one</li><li><p>two</p></li></ul><table><tr><th>a</th><th>b</th></tr>" \
           b"<tr><td>1</td><td>2</td></tr></table></body>"
    [document] = html.read(page, "f")
    assert document.sections[0].blocks == ["- one\n- two", "a | b\n1 | 2"]


def test_html_in_another_declared_charset_is_decoded():
    page = '<html><head><meta charset="iso-8859-1"><title>Caf\xe9</title></head><body><p>cr\xe8me</p></body></html>'
    [document] = html.read(page.encode("latin-1"), "f")
    assert document.title == "Caf\xe9" and document.sections[0].blocks == ["cr\xe8me"]


def test_html_without_title_uses_the_first_h1():
    [document] = html.read(b"<body><h1>Heading</h1><p>Text.</p></body>", "file name")
    assert document.title == "Heading" and outline(document) == [(("Heading",), None, ["Text."])]


def test_deeply_nested_html_is_read():
    page = b"<body>" + b"<div>" * 3000 + b"<p>deep text</p>" + b"</div>" * 3000 + b"</body>"
    [document] = html.read(page, "f")
    assert document.sections[0].blocks == ["deep text"]


# ---- feeds -------------------------------------------------------------------------------------


ATOM = b"""<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom"><title>Atom blog</title><id>urn:x</id><updated>2024-01-01T00:00:00Z</updated>
<entry><title>First entry</title><link href="https://atom.example/first"/><id>urn:1</id>
<updated>2024-01-01T00:00:00Z</updated><summary>Short.</summary>
<content type="html">&lt;h2 id="more"&gt;More&lt;/h2&gt;&lt;p&gt;Full text.&lt;/p&gt;
&lt;script&gt;bad()&lt;/script&gt;</content></entry>
<entry><title>No link</title><id>https://atom.example/by-id</id><updated>2024-01-01T00:00:00Z</updated>
<summary>Just a summary.</summary></entry>
</feed>"""


def test_atom_entries_with_content_summary_and_links():
    first, second = feed.read(ATOM, "f")
    assert (first.title, first.own_url, first.description) == ("First entry", "https://atom.example/first", "Short.")
    assert outline(first) == [(("First entry", "More"), "more", ["Full text."])]
    assert (second.title, second.own_url, second.description) == ("No link", "https://atom.example/by-id", None)
    assert outline(second) == [(("No link",), None, ["Just a summary."])]


def test_a_broken_feed_is_named_as_such():
    with pytest.raises(ImporterError, match="not a readable feed"):
        feed.read(b'<rss version="2.0"><<<>>>', "f")


def test_a_feed_cannot_pull_in_local_files_through_xml_entities(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT")
    hostile = (f'<?xml version="1.0"?><!DOCTYPE rss [<!ENTITY leak SYSTEM "{secret.as_uri()}">]>'
               '<rss version="2.0"><channel><title>t</title><item><title>Item</title>'
               '<link>https://x.example/i</link><description>before &leak; after</description></item>'
               '</channel></rss>').encode()
    documents = feed.read(hostile, "f")
    assert "TOP-SECRET" not in repr([(d.title, outline(d)) for d in documents])


# ---- PDF ---------------------------------------------------------------------------------------


def test_the_hand_written_pdf_is_a_real_pdf():
    data = minimal_pdf([["Hello (world)."], ["Second page."]], title="Doc")
    reader = pypdf.PdfReader(io.BytesIO(data), strict=True)
    assert reader.metadata.title == "Doc" and len(reader.pages) == 2
    assert reader.pages[0].extract_text() == "Hello (world)."


def test_pdf_pages_are_sections_linked_by_page_number():
    [document] = pdf.read(minimal_pdf([["First page line one", "continues here."], [], ["Third."]]), "report")
    assert document.title == "report"
    assert outline(document) == [
        (("report", "page 1"), "page=1", ["First page line one continues here."]),
        (("report", "page 3"), "page=3", ["Third."]),
    ]


def test_pdf_paragraphs_join_lines_and_hyphenated_words():
    assert pdf.paragraphs("A long line that wraps over the end of the line and goes on\nand on. Short end.\n\n"
                          "Hyphen- \nated inter-\nnational.") == [
        "A long line that wraps over the end of the line and goes on and on. Short end.",
        "Hyphen- ated international.",
    ]


def test_a_damaged_pdf_is_named_as_such():
    with pytest.raises(ImporterError, match="not a readable PDF"):
        pdf.read(b"%PDF-1.4\n1 0 obj <<", "f")


# ---- plain text --------------------------------------------------------------------------------


def test_text_title_is_a_short_first_line_standing_alone():
    [document] = plain.read(b"My notes\n\nFirst  paragraph\nwrapped.\n \nSecond.", "file")
    assert document.title == "My notes"
    assert outline(document) == [(("My notes",), None, ["First paragraph\nwrapped.", "Second."])]


def test_text_without_such_a_line_is_titled_by_its_file_name():
    [document] = plain.read(b"A first paragraph\nof two lines.\n\nSecond.", "notes 2024")
    assert document.title == "notes 2024" and len(document.sections[0].blocks) == 2


def test_text_that_is_not_utf8_is_named():
    with pytest.raises(ImporterError, match=r"not UTF-8 text \(byte 1 is 0xff\)"):
        plain.read(b"a\xffb", "f")


def test_fallback_titles_come_from_file_names():
    assert fallback_title(Path("posts/2024-05-01-my_first-post.md")) == "2024 05 01 my first post"


# ---- which files, in which order ---------------------------------------------------------------


def test_folders_are_walked_in_sorted_order_skipping_hidden_secret_and_unknown(tmp_path):
    for name in ["b.md", "a/z.txt", "a/b/c.html", "a.md", ".git/x.md", "x/.hidden.md", "k.SECRET.md", "pic.png",
                 "README", "data.xml", "news.rss"]:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("<rss><channel></channel></rss>" if name == "news.rss" else "<data/>")
    found = find_sources([tmp_path])
    assert [(source.relative, source.kind) for source in found.files] == [
        ("a/b/c.html", "html"), ("a/z.txt", "text"), ("a.md", "markdown"), ("b.md", "markdown"), ("news.rss", "feed"),
    ]
    assert dict(found.skipped_by_suffix) == {".png": 1, "(no suffix)": 1}
    assert found.not_feeds == 1


def test_a_file_named_twice_is_read_once(tmp_path):
    (tmp_path / "a.md").write_text("x")
    found = find_sources([tmp_path, tmp_path / "a.md"])
    assert [source.relative for source in found.files] == ["a.md"]


# ---- URLs --------------------------------------------------------------------------------------


def source(relative: str) -> SourceFile:
    return SourceFile(Path("/site") / relative, relative, "markdown")


def test_urls_are_the_base_plus_the_encoded_path_with_markdown_as_html():
    base = check_base_url("https://example.com/blog/")
    assert page_url(source("posts/My Post #1.md"), base) == "https://example.com/blog/posts/My%20Post%20%231.html"
    assert page_url(source("caf\u00e9.pdf"), base) == "https://example.com/blog/caf%C3%A9.pdf"
    assert page_url(source("x.md"), base, "/2024/x/") == "https://example.com/blog/2024/x/"
    assert page_url(source("x.md"), base, "https://elsewhere.example/x") == "https://elsewhere.example/x"
    assert page_url(source("x.md"), None) == Path("/site/x.md").resolve().as_uri()


def test_fragments_replace_any_fragment_and_are_encoded():
    assert with_fragment("https://x.example/a#old", "new") == "https://x.example/a#new"
    assert with_fragment("https://x.example/a", "caf\u00e9 au") == "https://x.example/a#caf%C3%A9%20au"
    assert with_fragment("https://x.example/a", None) == "https://x.example/a"


@pytest.mark.parametrize("base", ["example.com", "ftp://example.com/", "https://example.com/?q=1", "/blog"])
def test_the_base_url_must_be_an_http_url(base):
    with pytest.raises(ImporterError, match="--base-url: expected an http"):
        check_base_url(base)


# ---- kinds by content, and --format ------------------------------------------------------------


def test_format_reads_a_file_as_the_kind_named_whatever_its_name(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("# Notes\n\n## Soil\n\nCompost in spring.")
    found = find_sources([notes], format="markdown")
    assert [(source.relative, source.kind) for source in found.files] == [("notes.txt", "markdown")]


def test_format_on_a_folder_of_files_is_refused_in_one_line(tmp_path):
    with pytest.raises(ImporterError, match=r"^--format html: .* is a folder; name its files"):
        find_sources([tmp_path], format="html")


def test_an_unknown_format_lists_the_ones_there_are(tmp_path):
    with pytest.raises(ImporterError, match=r"^--format docz: not a format this importer reads; use one of .*markdown"):
        find_sources([tmp_path], format="docz")


def test_a_zip_or_json_that_is_no_export_is_counted_as_of_unknown_kind(tmp_path):
    with zipfile.ZipFile(tmp_path / "photos.zip", "w") as archive:
        archive.writestr("img/1.jpg", b"\xff\xd8")
    (tmp_path / "package.json").write_text('{"name": "x"}')
    found = find_sources([tmp_path])
    assert found.files == [] and dict(found.skipped_by_suffix) == {".zip": 1, ".json": 1}
