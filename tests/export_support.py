"""The exports of `tests/fixtures/exports/` as a writer has them, and what importing each must give.

`build_export` makes the zip a service hands out from its fixture folder (or copies the folder, as
an unzipped export, or the single file of a WordPress or Ghost export). `FOUND` is one sentence
of each export's published writing with the URL of its bit; `LEFT_OUT` the sentences of posts
that are imported only when asked for; `NEVER` what no import may ever read (private data the
exports carry beside the writing).
"""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "exports"
EXPORTS = ("substack", "medium", "wordpress", "ghost", "x")
FILES = {"wordpress": "wordpress.xml", "ghost": "ghost.json"}  # the others are folders, zipped by the service
BASE_URLS = {"substack": "https://theharbourlog.substack.com/", "ghost": "https://quietcoast.example/"}

FOUND = {
    "substack": ("The harbour seals returned to Pelican Cove in March, forty-one of them by our count, the most "
                 "since the survey began.", "https://theharbourlog.substack.com/p/seal-census"),
    "medium": ("A copper kettle sings because steam squeezes through a narrow brass reed in its spout.",
               "https://medium.com/@ada.quill/why-copper-kettles-sing-3f2a9c1b7d4e"),
    "wordpress": ("Rhubarb forced under terracotta pots is ready three weeks early, pale pink and tender.",
                  "https://gardenpath.example/2024/02/forcing-rhubarb/"),
    "ghost": ("Puffins on Skerry Island nest in old rabbit burrows above the west landing.",
              "https://quietcoast.example/puffin-burrows/"),
    "x": ("We used a quadrat of string, one metre square, laid on the rock at low tide.",
          "https://x.com/tidepoolnotes/status/1760000000000000001"),
}

# (export, the option that imports it, a sentence of it)
LEFT_OUT = [
    ("substack", "include_drafts", "The ferry timetable draft is not ready for readers yet."),
    ("substack", "access_tag", "Paid subscribers get the tide tables for Gull Rock"),
    ("medium", "include_drafts", "Teapots with bamboo handles crack in dry winters."),
    ("medium", "include_replies", "Great point, but aluminium kettles hum rather than sing."),
    ("wordpress", "include_drafts", "Draft notes about the paraffin greenhouse heater."),
    ("wordpress", "access_tag", "The spare key to the tool shed hangs behind the water butt."),
    ("ghost", "include_drafts", "Drafted: the winter timetable is still uncertain."),
    ("ghost", "access_tag", "Members hear first about the lighthouse open day in August."),
    ("x", "include_replies", "I think those were velvet swimming crabs, not shore crabs."),
    ("x", "include_retweets", "Sea slugs are having a remarkable year"),
]

NEVER = ["never.imported@example.com", "A direct message that must never be imported",
         "A commenter's note about slugs", "Attachment captions are not writing", "Menu item text is not writing",
         "Thanks for reading The Harbour Log", "Share"]


def zip_folder(folder: Path, target: Path) -> Path:
    """A zip of `folder`'s files, named from inside it, as the services write their exports."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(folder).as_posix())
    return target


def build_export(name: str, into: Path, *, zipped: bool = True) -> Path:
    """Export `name` in `into` as its writer has it: the zip (or, not `zipped`, the unzipped folder),
    or the WordPress or Ghost file."""
    into.mkdir(parents=True, exist_ok=True)
    if name in FILES:
        return Path(shutil.copy(FIXTURES / FILES[name], into / FILES[name]))
    if zipped:
        return zip_folder(FIXTURES / name, into / f"{name}-export.zip")
    return Path(shutil.copytree(FIXTURES / name, into / f"{name}-export"))
