"""The S3-compatible backend of `BlobStore`: workers that share no disk share a bucket.

`WAYPOINT_STORE=s3://bucket/prefix` puts the payload store under `prefix/payloads/` and the
transcript store under `prefix/transcripts/`, each blob at `.../ab/abcdef...` like a folder
store. Endpoint and credentials come from the usual AWS settings (`AWS_ENDPOINT_URL`,
`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`), read by boto3 itself.

This is a backend of `BlobStore` rather than Temporal's `contrib.aws.s3driver`, because that
driver takes the bucket and key from the claim (a forged reference reads any object the worker's
credentials reach), checks content only against a hash the same claim carries, raises from
`retrieve` (which fails a workflow task for good, see `_security.refused`), and cannot seal:
sealing before it would put a random nonce into its content address. Through `BlobStore` the
bucket gets the same confined names, verified reads and sealing as a folder. A PUT is atomic, so
no temporary objects exist; concurrent writers of one blob write the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from waypoint.errors import StoreUnavailableError
from waypoint.stores.blobs import Entry, StoreRefusal, is_digest

_MISSING = {"404", "NoSuchKey", "NotFound"}
_DENIED = {"403", "AccessDenied", "Forbidden"}
_RETRIES = Config(retries={"mode": "adaptive", "total_max_attempts": 10})
"""Throttling (503 SlowDown) is retried with backoff by boto3 before an error reaches a run."""


def _code(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


def _unavailable(where: str, what: str, err: ClientError) -> StoreUnavailableError:
    """A bucket error in words that say what to fix."""
    code = _code(err)
    if code in _DENIED:
        hint = "grant the worker's credentials s3:GetObject, s3:PutObject and s3:ListBucket on it"
    else:
        hint = "the bucket kept failing (throttling or an outage) after 10 attempts; retried later"
    return StoreUnavailableError(f"{where}: {what} failed ({code or err}); {hint}")


def parse_store_url(url: str) -> tuple[str, str]:
    """The bucket and prefix (no slashes at either end) of an `s3://bucket/prefix` URL.

    Raises:
        ValueError: Not an `s3://` URL with a bucket.
    """
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise ValueError(f"WAYPOINT_STORE={url!r}: use s3://bucket/prefix")
    return parts.netloc, parts.path.strip("/")


class Bucket:
    """Blobs as objects `prefix/ab/abcdef...` in one S3-compatible bucket."""

    def __init__(
        self, bucket: str, prefix: str = "", client: Any = None, region: str | None = None
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        # boto3 clients are thread-safe; the stores call them from worker threads.
        self.client = (
            client
            if client is not None
            else boto3.client("s3", region_name=region, config=_RETRIES)
        )

    def where(self) -> str:
        """See `waypoint.stores.blobs.Backend`."""
        return f"s3://{self.bucket}/{self.prefix}"

    def key(self, name: str) -> str:
        """The object key of blob `name` (a confined digest)."""
        return f"{self.prefix}/{name[:2]}/{name}" if self.prefix else f"{name[:2]}/{name}"

    def read(self, name: str) -> bytes | None:
        """See `waypoint.stores.blobs.Backend`; other errors (outage, denied) propagate."""
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self.key(name))
        except ClientError as err:
            if _code(err) in _MISSING:
                return None
            if _code(err) in _DENIED:
                # Without s3:ListBucket a missing object answers 403, not 404: a reader cannot
                # tell, so it refuses; a writer (`BlobStore.put`) goes on and writes the blob.
                raise StoreRefusal(
                    f"blob {name[:12]}: access denied in {self.where()} (missing, or the "
                    "credentials lack s3:GetObject; without s3:ListBucket S3 says 403 for "
                    "missing objects)"
                ) from None
            raise _unavailable(self.where(), f"reading blob {name[:12]}", err) from None
        with response["Body"] as body:
            return body.read()

    def write(self, name: str, data: bytes) -> None:
        """See `waypoint.stores.blobs.Backend`."""
        try:
            self.client.put_object(Bucket=self.bucket, Key=self.key(name), Body=data)
        except ClientError as err:
            raise _unavailable(self.where(), f"writing blob {name[:12]}", err) from None

    def entries(self, temp_grace: float) -> Iterator[Entry]:
        """See `waypoint.stores.blobs.Backend`; a bucket has no temporary objects."""
        start = f"{self.prefix}/" if self.prefix else ""
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=start
        )
        for page in pages:
            for item in page.get("Contents", []):
                key = PurePosixPath(item["Key"])
                fan, name = key.parent.name, key.name
                if str(key.parent.parent) == (self.prefix or ".") and is_digest(name):
                    if fan == name[:2]:
                        yield Entry(name, key, item["LastModified"].timestamp(), item["Size"])

    def touch(self, name: str) -> bool:
        """See `waypoint.stores.blobs.Backend`: a copy onto itself renews `LastModified`."""
        key = self.key(name)
        try:
            self.client.copy_object(
                Bucket=self.bucket,
                Key=key,
                CopySource={"Bucket": self.bucket, "Key": key},
                MetadataDirective="REPLACE",
            )
        except ClientError as err:
            if _code(err) in _MISSING | _DENIED:  # denied: a copy is not allowed; write anew
                return False
            raise _unavailable(self.where(), f"renewing blob {name[:12]}", err) from None
        return True

    def delete(self, entry: Entry, cutoff: float) -> bool:
        """See `waypoint.stores.blobs.Backend`: `LastModified` is read again just before.

        S3 has no delete conditional on age, so a reuse landing between that read and the
        delete (milliseconds, against an `older_than` of days) is not caught here.
        """
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=str(entry.path))
        except ClientError as err:
            if _code(err) in _MISSING:
                return False
            raise _unavailable(self.where(), f"checking blob {entry.name[:12]}", err) from None
        if head["LastModified"].timestamp() >= cutoff:
            return False
        self.client.delete_object(Bucket=self.bucket, Key=str(entry.path))
        return True
