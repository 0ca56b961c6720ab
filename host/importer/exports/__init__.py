"""Exports: what a writing service hands a writer who leaves (Substack, Medium, WordPress, Ghost, X).

An export is one file or folder holding many posts. Its kind's `expand` (see `kinds`) splits it
into `Part`s, one per post (an X thread, a WordPress item), each imported like a file of its own:
its own cache key (a re-run after one new post reads and embeds only that post), its own line when
it cannot be read (the other posts still imported), its own tick of the progress bar. A part's
`data` is what the kind's `read` turns into documents: the post's own bytes, or a JSON line of
what the export says about it followed by them (`pack`, `unpack`).

`expand` decides which posts are the writer's published writing: drafts, posts for paying or
signed-in readers only, replies to other people and retweets are left out unless asked for
(`ExportOptions`), and counted by reason (`SKIPS`) for the summary.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from host.importer.errors import ImporterError

# Why a post was left out -> (what the summary calls one such post, and several, and how to import them).
SKIPS = {
    "draft": ("draft", "drafts", "--include-drafts"),
    "private": ("post for paying or signed-in readers", "posts for paying or signed-in readers",
                "import them with --access-tag"),
    "reply": ("reply to others", "replies to others", "--include-replies"),
    "response": ("response", "responses", "--include-replies"),
    "retweet": ("retweet", "retweets", "--include-retweets"),
}

@dataclass(frozen=True)
class ExportOptions:
    include_drafts: bool = False  # drafts, scheduled and unpublished posts
    include_replies: bool = False  # X replies to other people, Medium responses
    include_retweets: bool = False
    include_private: bool = False  # paid-only, members-only, private posts: only into an --access-tag library


@dataclass(frozen=True)
class Part:
    """One post of an export: `member` says where it is in it (a zip member, `item 12 (hello)`)."""

    member: str
    data: bytes


@dataclass
class Expansion:
    parts: list[Part] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # a SKIPS reason -> posts left out for it
    problems: list[str] = field(default_factory=list)  # "member: what is wrong", one line each

    def skip(self, reason: str) -> None:
        assert reason in SKIPS, reason
        self.skipped[reason] += 1


def pack(meta: dict[str, Any], body: bytes = b"") -> bytes:
    """A part's data: what the export says about a post (one JSON line), then the post's own bytes."""
    return json.dumps(meta, ensure_ascii=False, sort_keys=True).encode("utf-8") + b"\n" + body


def unpack(data: bytes) -> tuple[dict[str, Any], bytes]:
    head, _, body = data.partition(b"\n")
    meta = json.loads(head)
    if not isinstance(meta, dict):
        raise ImporterError("an export part without its description")
    return meta, body


def text_of(value: Any) -> str:
    """A field an export may leave out, give as null or as a number: always a string, stripped."""
    return "" if value is None else " ".join(str(value).split())
