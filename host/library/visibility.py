"""Who may see a bit: the one rule every mask of visible rows is built from.

A row carries a tag id into its library's `tags`; id 0 is the public tag (""). A caller sees
public rows and rows whose tag their grant holds, nothing else, anywhere: results, counts,
library files, the page.
"""

from __future__ import annotations

PUBLIC = ""  # tag id 0


def allowed_tag_ids(tags: tuple[str, ...], granted: frozenset[str]) -> list[int]:
    """The ids in `tags` (where id 0 is public) that a caller holding `granted` may see."""
    return [tag_id for tag_id, tag in enumerate(tags) if tag_id == 0 or tag in granted]
