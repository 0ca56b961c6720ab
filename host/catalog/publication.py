"""What publishing a library folder puts at an origin: its manifest, and the local file behind each blob.

`plan_publication` reads a folder (already validated) into a `Publication`: every library file as
a content-addressed blob, with `compiled` its compiled store too (every file of the store's folder,
whatever the store format; the format comes from its meta.json, so a replica of another format
knows to compile instead). `changes` compares it with the manifest already published, for the
lines `publish` prints and for what must be uploaded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from host.catalog.generations import Catalog, discover
from host.origin.blobs import file_digest
from host.origin.history import next_published_at
from host.origin.manifest import Blob, CompiledFile, Manifest, PublishedLibrary


@dataclass(frozen=True)
class Publication:
    manifest: Manifest
    files: dict[str, Path]  # blob sha256 -> a local file holding it
    access_body: bytes | None = None
    stats: dict[Path, tuple[int, int]] = field(default_factory=dict)  # library file -> (size, mtime_ns) when read

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
                     access: tuple[Blob, bytes] | None = None) -> Publication:
    """The publication of the library files under `source`; with `catalog` (compiled from `source`
    into `compiled_dir`), their compiled stores too; `access`: the access file's blob and bytes."""
    compiled = {library.source: library for library in catalog.libraries} if catalog else {}
    libraries, files, stats = [], {}, {}
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
            published = with_compiled_store(published, compiled_dir / library.name, files)
        libraries.append(published)
    manifest = Manifest(tuple(libraries), access[0] if access else None, next_published_at(None))
    return Publication(manifest, files, access[1] if access else None, stats)


def with_compiled_store(library: PublishedLibrary, folder: Path, files: dict[str, Path]) -> PublishedLibrary:
    """`library` with the files of its compiled store (any format: every visible file of the folder)."""
    store_format = json.loads((folder / "meta.json").read_text())["store_format"]
    compiled = []
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or not path.is_file():
            continue
        sha256 = file_digest(path)
        files[sha256] = path
        compiled.append(CompiledFile(path.name, Blob(sha256, path.stat().st_size)))
    return PublishedLibrary(library.path, library.blob, library.mtime_ns, int(store_format), tuple(compiled))


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
        elif (previous.store_format, previous.compiled) != (library.store_format, library.compiled):
            lines.append(f"~ {library.path} (its compiled store)")
    lines += [f"- {path}" for path in earlier]
    if (before.access if before else None) != after.access:
        lines.append("~ the access file" if after.access else "- the access file")
    return lines


def same_content(before: Manifest | None, after: Manifest) -> bool:
    return before is not None and (before.libraries, before.access) == (after.libraries, after.access)
