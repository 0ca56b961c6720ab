"""S3 and S3-compatible stores (AWS, MinIO, Cloudflare R2) as origins: `s3://bucket/prefix`.

boto3 (the `s3` extra) because it is the reference client: it reads the endpoint and credentials
exactly as every AWS tool does (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`,
`AWS_DEFAULT_REGION`, profiles, SSO, container and instance roles), and its transfer manager
downloads a large object in parallel ranges. Credentials never pass through this module: boto3
finds them, and no message here is built from anything but the bucket, the key and an error code.

Every request has a connect and a read timeout and at most `ATTEMPTS` tries, so a stalled or
failing store costs one poll, never a stuck replica.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from host.origin.base import (
    Fetched,
    Listed,
    ObjectMissing,
    Origin,
    OriginError,
    OriginRefused,
    OriginUnreachable,
    Progress,
    Sink,
)

CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 10.0  # a stall longer than this is a failed poll; the next one tries again
ATTEMPTS = 2
CONNECTIONS = 48  # the transfer manager's 10 threads for each of the few blobs downloaded at once
DELETE_BATCH = 1000  # keys in one DeleteObjects request, S3's limit
EXTRA = "s3:// origins need boto3: pip install 'polymath-host[s3]'"
MISSING_CODES = {"NoSuchKey", "404", "NotFound"}
REFUSED_CODES = {"AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
                 "InvalidToken", "AccountProblem", "AllAccessDisabled", "TokenRefreshRequired"}


class S3Origin(Origin):
    def __init__(self, url: str) -> None:
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise OriginRefused(f"{url}: an S3 origin is s3://BUCKET or s3://BUCKET/PREFIX")
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        self.url = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise OriginRefused(EXTRA) from None
        # boto3 says at INFO where it found the endpoint and the credentials, on every client: not ours to log.
        for name in ("boto3", "botocore", "s3transfer"):
            logging.getLogger(name).setLevel(logging.WARNING)
        config = Config(connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT, max_pool_connections=CONNECTIONS,
                        retries={"max_attempts": ATTEMPTS, "mode": "standard"})
        try:
            self._client: Any = boto3.session.Session().client("s3", config=config)
        except Exception as problem:  # a malformed AWS_* variable or config file: say which kind, not its value
            raise OriginRefused(f"{self.url}: the AWS settings cannot be used ({type(problem).__name__})") from None

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def fetch(self, key: str, *, etag: str | None = None, limit: int) -> Fetched | None:
        arguments = {"Bucket": self.bucket, "Key": self._key(key)}
        if etag:
            arguments["IfNoneMatch"] = etag
        try:
            answer = self._client.get_object(**arguments)
            if answer["ContentLength"] > limit:
                answer["Body"].close()
                raise OriginUnreachable(f"{self.url}/{key}: {answer['ContentLength']:,} bytes, over the {limit:,} expected")
            body: bytes = answer["Body"].read()
        except OriginUnreachable:
            raise
        except Exception as problem:
            if _code(problem) in ("304", "NotModified"):
                return None
            raise self._translated(problem, key) from None
        return Fetched(body, answer.get("ETag"))

    def download(self, key: str, sink: Sink, progress: Progress | None = None) -> None:
        # A sink that cannot seek: the transfer manager still fetches ranges in parallel, and writes them in order.
        try:
            self._client.download_fileobj(self.bucket, self._key(key), sink, Callback=progress)
        except OriginError:  # the sink's own refusal
            raise
        except Exception as problem:
            raise self._translated(problem, key) from None

    def exists(self, key: str) -> bool:
        try:
            self._client.head_object(Bucket=self.bucket, Key=self._key(key))
        except Exception as problem:
            error = self._translated(problem, key)
            if isinstance(error, ObjectMissing):
                return False
            raise error from None
        return True

    def upload(self, key: str, source: Path, progress: Progress | None = None) -> None:
        try:
            self._client.upload_file(str(source), self.bucket, self._key(key), Callback=progress)
        except Exception as problem:
            raise self._translated(problem, key) from None

    def put(self, key: str, body: bytes) -> None:
        try:
            self._client.put_object(Bucket=self.bucket, Key=self._key(key), Body=body)
        except Exception as problem:
            raise self._translated(problem, key) from None

    def list_objects(self, prefix: str) -> Iterator[Listed]:
        start = len(self._key(""))
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self._key(prefix))
            for page in pages:
                for item in page.get("Contents", ()):
                    yield Listed(item["Key"][start:], int(item["Size"]), item["LastModified"].timestamp())
        except Exception as problem:
            raise self._translated(problem, prefix) from None

    def delete(self, keys: Sequence[str]) -> None:
        for first in range(0, len(keys), DELETE_BATCH):
            batch = keys[first: first + DELETE_BATCH]
            try:
                answer = self._client.delete_objects(Bucket=self.bucket, Delete={
                    "Objects": [{"Key": self._key(key)} for key in batch], "Quiet": True})
            except Exception as problem:
                raise self._translated(problem, batch[0]) from None
            for error in answer.get("Errors", ()):
                code = str(error.get("Code", ""))
                if code not in MISSING_CODES:
                    key = str(error.get("Key", ""))[len(self._key("")):]
                    kind = OriginRefused if code in REFUSED_CODES else OriginUnreachable
                    raise kind(f"{self.url}/{key}: cannot be deleted ({code})")

    def _translated(self, problem: Exception, key: str) -> Exception:
        """One safe line for whatever boto3 raised: built from the kind and code, never its text."""
        where = f"{self.url}/{key}"
        kind = type(problem).__name__
        code = _code(problem)
        if kind in ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"):
            return OriginRefused(f"{self.url}: no usable AWS credentials (set AWS_ACCESS_KEY_ID and "
                                 "AWS_SECRET_ACCESS_KEY, or another source of the AWS credential chain)")
        if code == "NoSuchBucket":
            return OriginRefused(f"{self.url}: bucket {self.bucket} does not exist (check the URL and AWS_ENDPOINT_URL)")
        if code in MISSING_CODES:
            return ObjectMissing(f"{where}: no such object")
        if code in REFUSED_CODES:
            return OriginRefused(f"{where}: access denied ({code}): check the credentials and the bucket's policy")
        if code:
            return OriginUnreachable(f"{where}: the store answered {code}")
        if kind in ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError"):
            return OriginUnreachable(f"{where}: cannot connect to the store ({kind})")
        if kind in ("ReadTimeoutError",):
            return OriginUnreachable(f"{where}: no answer within {READ_TIMEOUT:g} s")
        return OriginUnreachable(f"{where}: the transfer failed ({kind})")


def _code(problem: Exception) -> str:
    """The S3 error code of a botocore ClientError (or an s3transfer error wrapping one); '' otherwise."""
    response = getattr(problem, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        if code:
            return str(code)
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return str(status) if status else ""
    cause = problem.__cause__ or problem.__context__
    return _code(cause) if isinstance(cause, Exception) and cause is not problem else ""
