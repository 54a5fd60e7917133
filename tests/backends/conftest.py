"""Fixtures of the storage tests: the session's S3 server (``tests/s3server.py``) for the S3 chunk store."""

from __future__ import annotations

from s3server import S3Server, s3, s3_server

__all__ = ["S3Server", "s3", "s3_server"]
