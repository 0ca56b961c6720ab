"""What a caller may see: the result of checking its token."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Grant:
    """The subject behind a token and the access tags it grants.

    ``subject`` is ``None`` for anonymous callers (no token, or an opaque token the
    host does not know); their ``access_tags`` are empty, so they see public bits only.
    """

    subject: str | None
    access_tags: frozenset[str]

    @property
    def is_anonymous(self) -> bool:
        return self.subject is None


ANONYMOUS = Grant(subject=None, access_tags=frozenset())
