"""X's (Twitter's) archive (Settings -> Your account -> Download an archive of your data): a zip
whose `data/` folder holds the account's data as JavaScript files, each one assignment of JSON:
`window.YTD.tweets.part0 = [{"tweet": {...}}, ...]`. `data/manifest.js` (`window.__THAR_CONFIG`)
names the account (`userInfo.accountId`, `userName`) and the files of each kind of data
(`dataTypes.tweets.files`); older archives have `data/tweet.js` and `data/account.js` instead.
Only the tweets and the account's id and name are read: never direct messages, email, devices.

A thread (a tweet and the account's own replies to it, and to those) is one document, its tweets
in order, linked to its first tweet: `https://x.com/<userName>/status/<id>`. A tweet's text is its
`full_text` without the @names a reply starts with, its t.co links as the links they stand for,
its media links dropped and its HTML entities (`&amp;`) decoded. Replies to other people and
retweets are skipped unless asked for (`--include-replies`, `--include-retweets`).
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

from host.importer.archive import Archive, open_archive
from host.importer.chunking import tidy
from host.importer.document import Document, Section
from host.importer.errors import ImporterError, decode_text
from host.importer.exports import Expansion, ExportOptions, Part, pack, unpack
from host.importer.probe import Probe

DATA = "data/"
MANIFEST = "data/manifest.js"
_TWEET_FILE = re.compile(r"data/tweets?(?:-part\d+)?\.js")
_LEADING_NAMES = re.compile(r"(?:@\w+\s*)+")
TITLE_CHARACTERS = 80


def sniff(probe: Probe) -> bool:
    archive = probe.archive(DATA)
    if archive is None:
        return False
    if archive.has("data/tweets.js") or archive.has("data/tweet.js"):
        return True
    return archive.has(MANIFEST) and b"__THAR_CONFIG" in probe.member_head(DATA, MANIFEST)


def expand(path: Path, options: ExportOptions) -> Expansion:
    archive = open_archive(path, DATA)
    try:
        account_id, user_name, files = _account(archive)
        expansion = Expansion()
        tweets: dict[str, dict[str, Any]] = {}
        for name in files:
            try:
                entries = script_json(archive.read(name), name)
            except ImporterError as problem:
                expansion.problems.append(str(problem))
                continue
            for position, entry in enumerate(entries if isinstance(entries, list) else []):
                tweet = entry.get("tweet", entry) if isinstance(entry, dict) else None
                if not isinstance(tweet, dict) or not str(tweet.get("id_str", "")).isdigit():
                    expansion.problems.append(f"{name}: entry {position}: not a tweet with an id_str")
                    continue
                tweets[tweet["id_str"]] = tweet
        for thread in threads(tweets, account_id, options, expansion):
            first = thread[0]["id_str"]
            url = f"https://x.com/{user_name or 'i/web'}/status/{first}"
            texts = [text for text in (tweet_text(tweet) for tweet in thread) if text]
            if texts:
                member = f"thread {first}" if len(thread) > 1 else f"tweet {first}"
                expansion.parts.append(Part(member, pack({"url": url, "tweets": texts})))
        return expansion
    finally:
        archive.close()


def _account(archive: Archive) -> tuple[str | None, str | None, list[str]]:
    """The account's id and user name, and the files of its tweets."""
    if archive.has(MANIFEST):
        manifest = script_json(archive.read(MANIFEST), MANIFEST)
        user = manifest.get("userInfo", {}) if isinstance(manifest, dict) else {}
        listed = manifest.get("dataTypes", {}).get("tweets", {}).get("files", []) if isinstance(manifest, dict) else []
        files = [str(item["fileName"]).removeprefix("/") for item in listed if isinstance(item, dict)
                 and item.get("fileName")]
        return user.get("accountId"), user.get("userName"), files or _tweet_files(archive)
    account_id = user_name = None
    if archive.has("data/account.js"):
        entries = script_json(archive.read("data/account.js"), "data/account.js")
        account = entries[0].get("account", {}) if isinstance(entries, list) and entries else {}
        account_id, user_name = account.get("accountId"), account.get("username")
    return account_id, user_name, _tweet_files(archive)


def _tweet_files(archive: Archive) -> list[str]:
    files = [name for name in archive.names() if _TWEET_FILE.fullmatch(name)]
    if not files:
        raise ImporterError("no data/tweets.js: not an X archive")
    return files


def script_json(data: bytes, name: str) -> Any:
    """The JSON an archive's `window.YTD.x.part0 = [...]` assigns (ImporterError naming the file)."""
    text = decode_text(data)
    _, equals, value = text.partition("=")
    try:
        if not equals:
            raise ValueError("no `= ` assignment")
        return json.loads(value.strip().rstrip(";"))
    except ValueError as problem:
        raise ImporterError(f"{name}: not the archive's JavaScript ({problem})") from None


def threads(tweets: dict[str, dict[str, Any]], account_id: str | None, options: ExportOptions,
            expansion: Expansion) -> list[list[dict[str, Any]]]:
    """The threads to import, oldest first: each a tweet and the account's replies under it, in order."""
    children: dict[str, list[str]] = {}
    roots = []
    for tweet_id in sorted(tweets, key=int):
        tweet = tweets[tweet_id]
        parent = tweet.get("in_reply_to_status_id_str")
        own_reply = account_id is not None and tweet.get("in_reply_to_user_id_str") == account_id
        if parent and own_reply and parent in tweets and not is_retweet(tweets[parent]):
            children.setdefault(parent, []).append(tweet_id)
        else:
            roots.append(tweet_id)
    found = []
    for root in roots:
        reason = _left_out(tweets[root], account_id, options)
        if reason is not None:
            expansion.skip(reason)
            continue
        order, stack = [], [root]
        while stack:  # depth first: a reply right after the tweet it answers
            current = stack.pop()
            order.append(tweets[current])
            stack.extend(reversed(children.get(current, [])))
        found.append(order)
    return found


def _left_out(tweet: dict[str, Any], account_id: str | None, options: ExportOptions) -> str | None:
    """Why a thread's first tweet is not imported ("retweet", "reply"), or None."""
    if is_retweet(tweet):
        return None if options.include_retweets else "retweet"
    to_others = bool(tweet.get("in_reply_to_status_id_str")) and (
        account_id is None or tweet.get("in_reply_to_user_id_str") != account_id)
    return "reply" if to_others and not options.include_replies else None


def is_retweet(tweet: dict[str, Any]) -> bool:
    return str(tweet.get("full_text", "")).startswith("RT @")


def tweet_text(tweet: dict[str, Any]) -> str:
    text = str(tweet.get("full_text", ""))
    start = _display_start(tweet)
    if start and _LEADING_NAMES.fullmatch(text[:start]):
        text = text[start:]
    entities = tweet.get("entities") or {}
    for link in entities.get("urls") or []:
        if isinstance(link, dict) and link.get("url") and link.get("expanded_url"):
            text = text.replace(str(link["url"]), str(link["expanded_url"]))
    media = [*(entities.get("media") or []), *((tweet.get("extended_entities") or {}).get("media") or [])]
    for item in media:
        if isinstance(item, dict) and item.get("url"):
            text = text.replace(str(item["url"]), "")
    return html.unescape(text).strip()


def _display_start(tweet: dict[str, Any]) -> int:
    shown = tweet.get("display_text_range")
    try:
        return int(shown[0]) if isinstance(shown, list) and shown else 0
    except (TypeError, ValueError):
        return 0


def read(data: bytes, fallback_title: str) -> list[Document]:
    meta, _ = unpack(data)
    texts = [tidy(str(text)) for text in meta["tweets"]]
    first_line = " ".join(texts[0].split("\n", 1)[0].split()) if texts else ""
    title = first_line if len(first_line) <= TITLE_CHARACTERS else (
        first_line[:TITLE_CHARACTERS].rsplit(" ", 1)[0] + "\u2026")
    title = title or fallback_title
    return [Document(title, [Section((title,), None, texts)], own_url=str(meta["url"]))]
