"""The host's access file and its publishers': one `authorize` for every door.

A publisher folder may hold its own access file (host/catalog/scopes.py): its own signing keys,
trusted identity providers, revocations and `restricted` signals. A token it verifies grants its
tags only to the libraries in that folder: they come back *scoped* (host/library/visibility.py), so
a publisher's `members` never opens another publisher's `members`. The host's own access file
(`serve --access`) is the operator's, and its plain tags reach every folder.

A token is tried against the host's file and against the publishers' files it may belong to: those
whose issuer is the token's `iss` (each publisher should give its file an issuer of its own: `access
init --issuer`), or that trust that issuer as an identity provider for an audience the token's `aud`
names (one provider, Google or a company's Keycloak, may serve many publishers, each with its own
audience: a token is verified by those it is for, not by every one of them; when it names none, by
the first, to say why it is refused), and, for an opaque legacy token, those that hold legacy
tokens. What every file that verifies it grants is joined. A token no file verifies is refused with
the reason of the file it names (its issuer's), else the host's; one no file knows (an unknown
opaque token) is anonymous, as the original host had it.

Each file is an `AccessControl`, which follows its own file as it changes (revocations within a
second); the set of publisher files follows the catalog: `follow` is called with each generation.
Which files a token may belong to is indexed (by issuer and key id, by trusted issuer and audience)
when they change, so a host of ten thousand publishers tries one or two files per token, not all of
them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from access import ANONYMOUS, AccessControl, AccessSettings, Grant, TokenRejected
from access.config import public_only_settings
from access.errors import AccessConfigError
from access.provider_tokens import unverified_claims, unverified_header, unverified_issuer
from access.tokens import looks_like_jwt
from host.catalog.scopes import PUBLISHER_ACCESS_FILE
from host.library.visibility import scoped_tag

log = logging.getLogger("polymath_host.access")


class AccessRules:
    """The host's AccessControl and one per publisher folder, asked as one."""

    def __init__(self, host: AccessControl) -> None:
        self.host = host
        self._publishers: dict[str, AccessControl] = {}  # folder -> its access file's rules
        self._root: Path | None = None
        self._lock = threading.Lock()
        self._index = _Index.of({})

    # ---- what the host's own file says ----------------------------------------------------------

    @property
    def settings(self) -> AccessSettings:
        return self.host.settings

    @property
    def restricted_count(self) -> bool:
        return self.host.restricted_count

    @property
    def restricted_message(self) -> str:
        return self.host.restricted_message

    @property
    def cached_verifications(self) -> int:
        return self.host.cached_verifications + sum(control.cached_verifications for control in self._publishers.values())

    def restricted_for(self, scope: str | None) -> tuple[bool, str]:
        """The `restricted` signals of an answer confined to publisher folder `scope` (its own file's, or
        the host's where it has none or the answer reaches further: None)."""
        control = self._publishers.get(scope) if scope else None
        rules = control if control is not None else self.host
        return rules.restricted_count, rules.restricted_message

    def signals_on(self, scope: str | None) -> bool:
        """Whether an answer confined to `scope` tells what it held back (either `restricted` signal)."""
        count, message = self.restricted_for(scope)
        return count or bool(message)

    # ---- the publishers' files, as the catalog finds them -----------------------------------------

    @property
    def publishers(self) -> tuple[str, ...]:
        return tuple(sorted(self._publishers))

    def follow(self, root: Path | None, scopes: Iterable[str]) -> None:
        """The publisher folders of the catalog now served (under `root`): a new one's file is read,
        one gone is forgotten (its libraries' tags went with it, as the catalog compiled them again)."""
        wanted = set(scopes) if root is not None else set()
        with self._lock:
            if root != self._root:
                self._publishers, self._root = {}, root
            for folder in set(self._publishers) - wanted:
                del self._publishers[folder]
            for folder in sorted(wanted - set(self._publishers)):
                assert root is not None
                self._publishers[folder] = _publisher_rules(root / folder / PUBLISHER_ACCESS_FILE)
            self._index = _Index.of(self._publishers)

    def reload_if_changed(self, force: bool = False) -> bool:
        """Every file looked at again (the watcher asks once a poll); the index follows their changes."""
        changed = self.host.reload_if_changed(force=force)
        publishers = dict(self._publishers)
        reloaded = [control.reload_if_changed(force=force) for control in publishers.values()]
        if any(reloaded):
            with self._lock:
                self._index = _Index.of(self._publishers)
        return changed or any(reloaded)

    # ---- tokens ---------------------------------------------------------------------------------------

    def authorize(self, token: str | None) -> Grant:
        """The grant of `token` from every file that verifies it (see the module docstring); raises
        TokenRejected when a file should have verified it and did not, and none did."""
        if not token:
            return ANONYMOUS
        refused: TokenRejected | None = None
        try:
            grant = self.host.authorize(token)
        except TokenRejected as rejected:
            grant, refused = ANONYMOUS, rejected
        candidates = self._candidates(token)
        if not candidates:
            if refused is not None:
                raise refused
            return grant
        if refused is not None and not self._names_the_host(token):
            refused = None  # the host never knew it: the file it names says why, below
        tags, subject = set(grant.access_tags), grant.subject
        for folder, control in candidates:
            try:
                theirs = control.authorize(token)
            except TokenRejected as rejected:
                refused = refused or rejected
                continue
            if theirs.subject is None:
                continue
            tags.update(scoped_tag(folder, tag) for tag in theirs.access_tags)
            subject = subject or theirs.subject
        if subject is None:
            if refused is not None:
                raise refused
            return ANONYMOUS
        return Grant(subject, frozenset(tags))

    def _names_the_host(self, token: str) -> bool:
        """Whether `token` says it is the host's own file's, or of an identity provider the host trusts."""
        if not looks_like_jwt(token):
            return True
        issuer = unverified_issuer(token) or ""
        settings = self.host.settings
        return issuer == settings.issuer or settings.trusted_issuer(issuer) is not None

    def keys_pending(self, token: str | None) -> Future[Any] | None:
        """The first fetch of a trusted issuer's keys that `token` should wait for, if any (host first)."""
        pending = self.host.keys_pending(token)
        if pending is not None or not token:
            return pending
        for _, control in self._candidates(token):
            pending = control.keys_pending(token)
            if pending is not None:
                return pending
        return None

    def _candidates(self, token: str) -> list[tuple[str, AccessControl]]:
        """The publishers' files `token` may belong to (see `_Index`)."""
        publishers, index = self._publishers, self._index
        if not publishers:
            return []
        if not looks_like_jwt(token):
            folders = index.legacy
        else:
            claims = unverified_claims(token) or {}
            try:
                kid = unverified_header(token).get("kid")
            except TokenRejected:
                return []
            issuer, aud = claims.get("iss"), claims.get("aud")
            issuer = issuer if isinstance(issuer, str) else ""
            audiences = dict.fromkeys(a for a in (aud if isinstance(aud, list) else [aud]) if isinstance(a, str))
            trusting = [folder for audience in audiences for folder in index.trusting.get((issuer, audience), ())]
            folders = [*index.own.get((issuer, kid if isinstance(kid, str) else ""), ()),
                       *(trusting or index.first_trusting.get(issuer, []))]
        return [(folder, publishers[folder]) for folder in dict.fromkeys(folders) if folder in publishers]


class _Index:
    """Which publishers' files a token may belong to: by (issuer, key id) of their own keys, by the
    (identity provider, audience) they trust (and the first file trusting each provider, which says
    why a token for no audience trusted is refused), and those holding opaque legacy tokens."""

    def __init__(self, own: dict[tuple[str, str], list[str]], trusting: dict[tuple[str, str], list[str]],
                 first_trusting: dict[str, list[str]], legacy: list[str]) -> None:
        self.own, self.trusting, self.first_trusting, self.legacy = own, trusting, first_trusting, legacy

    @classmethod
    def of(cls, publishers: dict[str, AccessControl]) -> _Index:
        own: dict[tuple[str, str], list[str]] = {}
        trusting: dict[tuple[str, str], list[str]] = {}
        first_trusting: dict[str, list[str]] = {}
        legacy = []
        for folder, control in sorted(publishers.items()):
            settings = control.settings
            for key in settings.keys:
                own.setdefault((settings.issuer, key.kid), []).append(folder)
            for trusted in settings.trusted_issuers:
                trusting.setdefault((trusted.issuer, trusted.audience), []).append(folder)
                first_trusting.setdefault(trusted.issuer, [folder])
            if settings.legacy_tokens:
                legacy.append(folder)
        return cls(own, trusting, first_trusting, legacy)


def _publisher_rules(path: Path) -> AccessControl:
    """A publisher folder's access file; one that cannot be read is public-only (fail closed) until
    it is mended, said once in the log."""
    try:
        return AccessControl.from_file(path)
    except AccessConfigError as problem:
        log.error("publisher access file not loaded, its folder's private libraries are hidden: %s", problem)
        return AccessControl(public_only_settings(str(path)), path)  # it is looked at again as it changes
