"""Origins: where a replica's libraries come from, and where `polymath-host publish` puts them.

One small interface (`base.Origin`: fetch a small object conditionally, download a large one to a
file, and for publishing: see whether an object exists, upload one, list and delete them) with three kinds behind it: a
local folder (`local`, also `file://`), S3 and S3-compatible stores (`s3`, boto3, the `s3` extra)
and plain HTTP(S) static servers (`web`, read-only, the standard library). `open_origin(url)` picks
one. A published set is content-addressed blobs plus one manifest written last (`manifest`);
`blobs` downloads a blob to a temporary file and keeps it only once its size and SHA-256 match.
`publisher_keys` and `signatures` sign a manifest with the publisher's Ed25519 key and check it
against the keys a replica pins; `history` names the manifests kept after their set is replaced,
and `pruning` decides what none of the recent ones names.

This room is the first of the data's way: it knows bytes and names, never what a library holds.
Nothing here logs or raises a credential: errors name the origin by its URL and say what to do.
"""

from host.origin.base import ObjectMissing, Origin, OriginError, OriginRefused, OriginUnreachable, is_origin_url
from host.origin.opening import open_origin

__all__ = ["ObjectMissing", "Origin", "OriginError", "OriginRefused", "OriginUnreachable", "is_origin_url",
           "open_origin"]
