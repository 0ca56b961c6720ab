"""Who may see a bit: the one rule every mask of visible rows is built from.

A row carries a tag id into its segment's `tags`; id 0 is the public tag (""). A caller sees
public rows and rows whose tag their grant holds, nothing else, anywhere: results, counts,
library files, the page.

A publisher's folder may hold its own access file (host/catalog/scopes.py): the tags its tokens
grant reach only that folder's libraries. So a row of a library in such a folder carries a *scoped*
tag, `scoped_tag(folder, tag)`, and a grant from that access file holds scoped tags too: a
publisher's `members` never opens another publisher's `members`. The host's own access file
grants plain tags, which reach every folder: a plain `members` opens every scoped `members`.
"""

from __future__ import annotations

PUBLIC = ""  # tag id 0
SCOPE_MARK = "\0"  # between a scope and its tag: never in a folder's path (nor in a tag: bit_checks refuses it)


def scoped_tag(scope: str, tag: str) -> str:
    """`tag` as the access file of publisher folder `scope` grants it ("" is the host's: the tag as it is)."""
    return f"{scope}{SCOPE_MARK}{tag}" if scope and tag else tag


def unscoped(tag: str) -> str:
    """The tag a scoped tag names, without its scope (a plain tag as it is)."""
    return tag.rpartition(SCOPE_MARK)[2]


def tag_scope(tag: str) -> str:
    """The publisher folder a scoped tag belongs to ("" for a plain tag)."""
    return tag.rpartition(SCOPE_MARK)[0]


def may_see(tag: str, granted: frozenset[str]) -> bool:
    """Whether a caller holding `granted` may see a row tagged `tag`."""
    return tag == PUBLIC or tag in granted or (SCOPE_MARK in tag and unscoped(tag) in granted)


def allowed_tag_ids(tags: tuple[str, ...], granted: frozenset[str]) -> list[int]:
    """The ids in `tags` (where id 0 is public) that a caller holding `granted` may see."""
    return [tag_id for tag_id, tag in enumerate(tags) if tag_id == 0 or may_see(tag, granted)]
