"""A remote's bucket from its URL: ``dir:///path`` (a folder) or ``s3://bucket/prefix`` (an S3 prefix).

The :class:`~engram.backends.buckets.Bucket` seam and its implementations live in the storage layer
(:mod:`engram.backends.buckets`), shared with the live S3 chunk store; they are re-exported here for the remotes.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

from engram.backends.buckets import S3_RETRY, WORKERS, Bucket, DirBucket, S3Bucket
from engram.breakers import RetryPolicy
from engram.errors import ConfigError
from engram.redaction import redact_url

__all__ = ["S3_RETRY", "WORKERS", "Bucket", "DirBucket", "S3Bucket", "open_bucket"]


def open_bucket(url: str, *, retry: RetryPolicy | None = None) -> Bucket:
    """The bucket of a remote URL: ``dir:///path`` (or a plain path) or ``s3://bucket/prefix?endpoint=...``
    (``retry``: how an S3 bucket retries transient failures; default the remotes' policy, ``S3_RETRY``).

    A URL that carries a credential (a password, a secret query parameter) is refused: S3 credentials come from
    boto3's chain, and a URL is shown in messages, ``/readyz`` and the names of circuit breakers."""
    shown = redact_url(url)
    if shown != url:
        raise ConfigError(
            f"remote URL {shown!r} carries a credential: engram takes S3 credentials from AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, a profile or a role; rename the remote with a URL without one"
        )
    parts = urlsplit(url)
    if parts.scheme == "dir":
        path = parts.netloc + parts.path if parts.netloc else parts.path
        if not path:
            raise ConfigError(f"remote URL {url!r} names no folder: use dir:///absolute/path")
        return DirBucket(path)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ConfigError(f"remote URL {url!r} names no bucket: use s3://bucket/prefix")
        if "@" in parts.netloc:
            raise ConfigError(f"remote URL {url!r} has a user name: engram takes S3 credentials from boto3's chain")
        options = dict(parse_qsl(parts.query))
        unknown = set(options) - {"endpoint", "region"}
        if unknown:
            raise ConfigError(f"unknown option(s) {', '.join(sorted(unknown))} in {url!r}: endpoint, region")
        return S3Bucket(parts.netloc, parts.path, endpoint=options.get("endpoint"), region=options.get("region"),
                        retry=retry)  # fmt: skip
    if parts.scheme == "" and url:
        return DirBucket(url)
    raise ConfigError(f"unsupported remote URL {url!r}: use dir:///path or s3://bucket/prefix")
