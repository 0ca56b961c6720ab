"""The second process that reads an import's files: files that carry their bytes with them (an export's
posts, a website's pages) go to it while it sends back large parts, and neither side waits on the other."""

from __future__ import annotations

import multiprocessing
import threading

from importer_support import count_words

from host.importer.reading import READ_AHEAD, ReadSettings, read_files
from host.importer.sources import SourceFile


def test_posts_that_carry_their_bytes_are_read_in_a_second_process_without_a_pipe_full_both_ways(tmp_path):
    # Each post is ~126 KB (more than a pipe holds) and gives ~126 KB of chunks back: asking for the posts
    # ahead while the process sends the first one's chunks fills both pipes at once.
    page = ("<html><body>" + "".join(f"<p>{f'word{n} ' * 40}</p>" for n in range(400)) + "</body></html>").encode()
    posts = [SourceFile(tmp_path / "export.zip", f"export.zip/p{n}.html", "html", f"p{n}.html", page)
             for n in range(2 * READ_AHEAD + 4)]
    reads = []

    def read_all() -> None:
        reads.extend(read_files(posts, ReadSettings(None, 40, "test:words"), count_words, set(), True, count_words))

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    reader.join(timeout=300)  # not a timing test: without the fix it never ends; with it, about a second

    assert not reader.is_alive(), "the import and its second process wait on each other"
    assert [read.source.member for read in reads] == [post.member for post in posts]
    assert all(read.problem is None and read.chunks is not None and len(read.chunks.bits) > 100 for read in reads)
    assert not multiprocessing.active_children()
