"""`publish --prune`: what no recent set names goes, once past the grace period, and nothing else.

What must hold: objects named by the last N sets, by a set replaced within the grace period, or
written within it (a publish in flight) stay; keys outside the published layout are never touched;
an origin published before the history began loses nothing younger than the grace period; the dry
run changes nothing; the result is one line of counts and bytes; bad options are one line each; and
a replica still downloading the set before never loses an object to a prune (while, without the
grace period, it would: the test can fail).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from origin_support import library_folder, publish_now

from host.catalog.replica import Replica
from host.cli import main
from host.origin.base import Progress, Sink
from host.origin.local import FolderOrigin
from host.origin.manifest import MANIFEST_KEY, parse_manifest
from host.origin.pruning import plan_prune

HOUR = 3600.0


def stored(destination: Path) -> set[str]:
    return {path.relative_to(destination).as_posix() for path in destination.rglob("*") if path.is_file()}


def named_now(destination: Path) -> set[str]:
    """The objects the manifest in force names."""
    manifest = parse_manifest((destination / MANIFEST_KEY).read_bytes(), "test")
    return {blob.key for blob in manifest.blobs()}


@pytest.fixture
def four_sets(tmp_path: Path) -> tuple[Path, Path, list[set[str]]]:
    """Four sets published one after another (b changes each time, a never); the objects each named."""
    source = library_folder(tmp_path / "source", a=1)
    destination = tmp_path / "published"
    named = []
    for version in range(4):
        library_folder(source, b=10 + version)
        publish_now(source, destination)
        named.append(named_now(destination))
    return source, destination, named


def test_prune_deletes_only_what_none_of_the_last_sets_names(
        four_sets: tuple[Path, Path, list[set[str]]], capsys: pytest.CaptureFixture[str]) -> None:
    source, destination, named = four_sets
    before = stored(destination)
    sizes = {key: (destination / key).stat().st_size for key in before}
    capsys.readouterr()
    publish_now(source, destination, "--prune", "--keep-sets", "2", "--older-than", "0")
    said = capsys.readouterr().err.splitlines()[1:]  # after "already holds this set"
    after = stored(destination)
    assert named[2] | named[3] <= after
    assert not (named[0] | named[1]) - (named[2] | named[3]) & after  # the first two sets' own objects went
    assert len([key for key in after if key.startswith("manifests/")]) == 2
    gone = before - after
    assert said == [f"pruned {FolderOrigin(destination).url}: deleted {len(gone)} objects ({sum(sizes[key] for key in gone):,} "
                    f"bytes); kept {len(after) - 1} ({sum(sizes[key] for key in after if key != MANIFEST_KEY):,} bytes): "
                    "named by the last 2 sets, or within the grace period (0)"]


def test_a_set_replaced_within_the_grace_period_keeps_its_objects(four_sets: tuple[Path, Path, list[set[str]]]) -> None:
    _, destination, named = four_sets
    origin = FolderOrigin(destination)
    plan = plan_prune(origin, keep_sets=1, grace=HOUR)
    assert plan.doomed == []  # every set was replaced a moment ago
    later = plan_prune(origin, keep_sets=1, grace=HOUR, now=time.time() + 2 * HOUR)
    assert {item.key for item in later.doomed} >= (named[0] | named[1] | named[2]) - named[3]
    assert not {item.key for item in later.doomed} & named[3]


def test_an_object_written_within_the_grace_period_stays_though_no_set_names_it(
        four_sets: tuple[Path, Path, list[set[str]]]) -> None:
    _, destination, _ = four_sets
    in_flight = destination / "objects" / "sha256" / ("f" * 64)  # uploaded by a publish whose manifest is not written yet
    in_flight.write_bytes(b"a library on its way")
    past = time.time() + 2 * HOUR
    for path in destination.rglob("*"):
        if path != in_flight:
            os.utime(path, (time.time() - 2 * HOUR,) * 2)
    doomed = {item.key for item in plan_prune(FolderOrigin(destination), keep_sets=1, grace=HOUR).doomed}
    assert in_flight.relative_to(destination).as_posix() not in doomed
    assert in_flight.relative_to(destination).as_posix() in {
        item.key for item in plan_prune(FolderOrigin(destination), keep_sets=1, grace=HOUR, now=past).doomed}


def test_an_origin_published_before_the_history_began_waits_out_the_grace_period(
        four_sets: tuple[Path, Path, list[set[str]]]) -> None:
    _, destination, named = four_sets
    for path in (destination / "manifests").iterdir():  # as an earlier version published it: no history
        path.unlink()
    for path in (destination / "objects").rglob("*"):
        os.utime(path, (time.time() - 2 * HOUR,) * 2)  # the objects are old; manifest.json was written just now
    origin = FolderOrigin(destination)
    assert plan_prune(origin, keep_sets=1, grace=HOUR).doomed == []
    doomed = {item.key for item in plan_prune(origin, keep_sets=1, grace=HOUR, now=time.time() + 2 * HOUR).doomed}
    assert doomed == (named[0] | named[1] | named[2]) - named[3]


def test_keys_outside_the_published_layout_are_never_touched(four_sets: tuple[Path, Path, list[set[str]]]) -> None:
    source, destination, _ = four_sets
    strays = [destination / "notes" / "README.txt", destination / "manifests" / "by-hand.json", destination / "index.html"]
    for stray in strays:
        stray.parent.mkdir(exist_ok=True)
        stray.write_text("the operator's")
    publish_now(source, destination, "--prune", "--keep-sets", "1", "--older-than", "0")
    assert all(stray.read_text() == "the operator's" for stray in strays)


def test_a_dry_run_deletes_nothing_and_says_what_it_would(
        four_sets: tuple[Path, Path, list[set[str]]], capsys: pytest.CaptureFixture[str]) -> None:
    source, destination, _ = four_sets
    before = {key: (destination / key).read_bytes() for key in stored(destination)}
    library_folder(source, c=5)
    capsys.readouterr()
    assert main(["publish", str(source), str(destination), "--prune", "--keep-sets", "1", "--older-than", "0",
                 "--dry-run"]) == 0
    said = capsys.readouterr().err
    assert "+ c.json" in said and "dry run: would upload 1 objects" in said
    assert f"dry run: pruning {FolderOrigin(destination).url} would delete " in said
    assert {key: (destination / key).read_bytes() for key in stored(destination)} == before


@pytest.mark.parametrize(("options", "message"), [
    (("--prune", "--older-than", "5x"), "error: --older-than '5x' is not a duration: give a number and a unit, "
                                         "as 90s, 15m, 12h, 1d or 2w (0 for none)"),
    (("--prune", "--older-than=-1d"), "error: --older-than '-1d' is not a duration"),
    (("--prune", "--keep-sets", "0"), "error: --keep-sets 0: keep at least 1 set (the one in force is never pruned)"),
    (("--keep-sets", "2",), "error: --keep-sets and --older-than only go with --prune"),
])
def test_bad_prune_options_are_one_line_and_nothing_is_published(
        tmp_path: Path, options: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    source = library_folder(tmp_path / "source", a=1)
    assert main(["publish", str(source), str(tmp_path / "published"), *options]) == 1
    said = capsys.readouterr().err
    assert said.startswith(message) and said.count("\n") == 1
    assert not (tmp_path / "published").exists()


class GatedOrigin(FolderOrigin):
    """A folder origin whose downloads wait until `release` is set: a replica caught mid-download."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.waiting = threading.Event()
        self.release = threading.Event()

    def download(self, key: str, sink: Sink, progress: Progress | None = None) -> None:
        self.waiting.set()
        assert self.release.wait(30)
        super().download(key, sink, progress)


@pytest.mark.parametrize("grace", ["1h", "0"])
def test_a_replica_downloading_the_set_before_never_loses_an_object_to_a_prune(tmp_path: Path, grace: str) -> None:
    source = library_folder(tmp_path / "source", a=1, b=1)
    destination = tmp_path / "published"
    publish_now(source, destination)
    origin = GatedOrigin(destination)
    replica = Replica(origin, tmp_path / "cache")
    origin.release.set()
    assert replica.sync() is not None
    origin.release.clear()
    origin.waiting.clear()
    library_folder(source, b=2)
    publish_now(source, destination)  # the set the replica is about to download
    downloading = (source / "b.json").read_bytes()
    outcome: list[object] = []
    syncing = threading.Thread(target=lambda: outcome.append(replica.poll()))
    syncing.start()
    assert origin.waiting.wait(30)  # it has read the manifest and is downloading
    library_folder(source, b=3)
    publish_now(source, destination, "--prune", "--keep-sets", "1", "--older-than", grace)
    origin.release.set()
    syncing.join(30)
    if grace == "1h":
        switched = outcome[0]
        assert isinstance(switched, Path) and replica.status.failures == 0
        assert (switched / "b.json").read_bytes() == downloading
    else:  # without the grace period the prune takes the object from under it: what the grace period is for
        assert outcome[0] is None and replica.status.failures == 1
        assert replica.status.problem is not None and "no such object" in replica.status.problem
    newest = replica.poll()  # and the next poll takes the newest set
    assert newest is not None and (newest / "b.json").read_bytes() == (source / "b.json").read_bytes()



def test_publish_help_says_the_pruning_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["publish", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "(default 3; at least 1)" in said and "(default 1d)" in said and "--dry-run" in said
