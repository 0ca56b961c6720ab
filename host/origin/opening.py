"""`open_origin(url)`: the origin a URL names (`s3://`, `http(s)://`, `file://`) or a local folder."""

from __future__ import annotations

from pathlib import Path

from host.origin.base import Origin, OriginRefused, is_origin_url
from host.origin.local import FolderOrigin


def open_origin(where: str) -> Origin:
    """The origin at `where`: a URL, or else a local folder. OriginRefused for what cannot be one."""
    lowered = where.lower()
    if lowered.startswith("s3://"):
        from host.origin.s3 import S3Origin  # boto3 loads only for S3 origins
        return S3Origin(where)
    if lowered.startswith(("http://", "https://")):
        from host.origin.web import WebOrigin
        return WebOrigin(where)
    if lowered.startswith("file://"):
        return FolderOrigin.from_url(where)
    if is_origin_url(where):
        raise OriginRefused(f"{where}: not an origin this host reads (s3://, https://, http://, file://)")
    return FolderOrigin(Path(where))
