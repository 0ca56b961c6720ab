"""What publishing a library folder puts at an origin: its manifest, and the local file behind each blob.

`plan_publication` reads a folder (already validated) into a `Publication`: every library file as
a content-addressed blob, with a catalog compiled from it the segments serving them too (every file
of a segment's folder, whatever the store format; the format comes from its meta.json, so a replica
of another format knows to compile instead), and the publishers' access files' edge editions.
`changes` compares it with the manifest already published, for the lines `publish` prints and for
what must be uploaded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from host.catalog.generations import Catalog, discover
from host.catalog.plan import SEGMENTS
from host.origin.blobs import file_digest
from host.origin.history import next_published_at
from host.origin.manifest import Blob, CompiledFile, Manifest, PublishedLibrary, PublishedScope, PublishedSegment


@dataclass(frozen=True)
class Publication:
    manifest: Manifest
    files: dict[str, Path]  # blob sha256 -> a local file holding it
    access_body: bytes | None = None
    stats: dict[Path, tuple[int, int]] = field(default_factory=dict)  # library file -> (size, mtime_ns) when read
    bodies: dict[str, bytes] = field(default_factory=dict)  # blob sha256 -> bytes made here (edge editions)

    def changed_since_read(self) -> list[Path]:
        """Library files written to after they were read: their blobs may not hold what the manifest says."""
        moved = []
        for path, (size, mtime_ns) in self.stats.items():
            try:
                stat = path.stat()
            except OSError:
                moved.append(path)
                continue
            if (stat.st_size, stat.st_mtime_ns) != (size, mtime_ns):
                moved.append(path)
        return moved


def plan_publication(source: Path, *, catalog: Catalog | None = None, compiled_dir: Path | None = None,
                     access: tuple[Blob, bytes] | None = None,
                     publishers: dict[str, tuple[Blob, bytes]] | None = None,
                     at_origin: Manifest | None = None) -> Publication:
    """The publication of the library files under `source`; with `catalog` (compiled from `source`
    into `compiled_dir`), the segments serving them too; `access`: the access file's blob and bytes;
    `publishers`: each publisher folder's access file's edge edition, by folder. `at_origin`, the set
    at the origin now, spares hashing the segments it holds already."""
    before = {segment.name: segment for segment in at_origin.segments} if at_origin else {}
    compiled = {library.source: library for library in catalog.libraries} if catalog else {}
    libraries, files, stats, segments = [], {}, {}, {}
    for entry in discover(source):
        stat = entry.path.stat()
        stats[entry.path] = (stat.st_size, stat.st_mtime_ns)
        library = compiled.get(entry.path)
        if library is not None and library.source_key.matches_stat(stat):
            sha256 = library.source_key.sha256  # hashed when it was compiled
        else:
            sha256, library = file_digest(entry.path), None
        blob = Blob(sha256, stat.st_size)
        files[sha256] = entry.path
        published = PublishedLibrary(f"{entry.name}.json", blob, stat.st_mtime_ns)
        if library is not None and compiled_dir is not None:
            name = library.segment.name
            if name not in segments:
                segments[name] = published_segment(compiled_dir / SEGMENTS / name, files, before.get(name))
            published = PublishedLibrary(published.path, blob, published.mtime_ns, name, library.member)
        libraries.append(published)
    bodies = {}
    scopes = []
    for folder, (scope_blob, body) in sorted((publishers or {}).items()):
        bodies[scope_blob.sha256] = body
        scopes.append(PublishedScope(folder, scope_blob))
    if access is not None:
        bodies[access[0].sha256] = access[1]
    manifest = Manifest(tuple(libraries), access[0] if access else None, next_published_at(None),
                        tuple(segments[name] for name in sorted(segments)), tuple(scopes))
    return Publication(manifest, files, access[1] if access else None, stats, bodies)


def published_segment(folder: Path, files: dict[str, Path], before: PublishedSegment | None = None) -> PublishedSegment:
    """The segment in `folder` as the manifest names it (every visible file; `files` learns where each
    blob is). A segment is written once under a name never used again, so one the origin holds already
    (`before`: the same files, of the same sizes) is named by the digests published then, not hashed."""
    store_format = json.loads((folder / "meta.json").read_text())["store_format"]
    paths = [path for path in sorted(folder.iterdir()) if not path.name.startswith(".") and path.is_file()]
    sizes = {path.name: path.stat().st_size for path in paths}
    if before is not None and before.store_format == store_format and sizes == {
            file.name: file.blob.size for file in before.files}:
        files.update((file.blob.sha256, folder / file.name) for file in before.files)
        return before
    compiled = []
    for path in paths:
        sha256 = file_digest(path)
        files[sha256] = path
        compiled.append(CompiledFile(path.name, Blob(sha256, sizes[path.name])))
    return PublishedSegment(folder.name, int(store_format), tuple(compiled))


def changes(before: Manifest | None, after: Manifest) -> list[str]:
    """One line per library added (+), changed (~) or removed (-), then the access file's fate."""
    earlier = {library.path: library for library in before.libraries} if before else {}
    lines = []
    for library in after.libraries:
        previous = earlier.pop(library.path, None)
        if previous is None:
            lines.append(f"+ {library.path} ({library.blob.size:,} bytes)")
        elif previous.blob != library.blob:
            lines.append(f"~ {library.path} ({library.blob.size:,} bytes)")
        elif (previous.segment, previous.member) != (library.segment, library.member):
            lines.append(f"~ {library.path} (its compiled segment)")
    lines += [f"- {path}" for path in earlier]
    if (before.access if before else None) != after.access:
        lines.append("~ the access file" if after.access else "- the access file")
    earlier_scopes = {scope.folder: scope.blob for scope in before.publishers} if before else {}
    for scope in after.publishers:
        if earlier_scopes.pop(scope.folder, None) != scope.blob:
            lines.append(f"~ {scope.folder}/ (its access file)")
    lines += [f"- {folder}/ (its access file)" for folder in earlier_scopes]
    return lines


def same_content(before: Manifest | None, after: Manifest) -> bool:
    return before is not None and (before.libraries, before.access, before.segments, before.publishers) == (
        after.libraries, after.access, after.segments, after.publishers)
