"""What engram shows of URLs and errors: no password, no secret query value, and (over HTTP) no server path."""

from __future__ import annotations

import pytest

from engram.redaction import has_secret, hide_paths, redact_url, scrub, scrub_value


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("s3://AKIAEXAMPLE:TOPSECRETKEY@bucket/p", "s3://AKIAEXAMPLE:***@bucket/p"),
        ("s3://b/p?endpoint=http://AK:TOPSECRETKEY@minio:9000", "s3://b/p?endpoint=http://AK:***@minio:9000"),
        ("postgresql://u:pw@db/engram?password=pw2&sslmode=require", "postgresql://u:***@db/engram?password=***&sslmode=require"),
        ("https://h/x?X-Amz-Signature=abc&X-Amz-Credential=AK%2F2020&a=1", "https://h/x?X-Amz-Signature=***&X-Amz-Credential=***&a=1"),
        ("failed on redis://:pw@cache:6379/0 (timeout)", "failed on redis://:***@cache:6379/0 (timeout)"),
    ],
)  # fmt: skip
def test_redaction_masks_passwords_and_secret_parameters(url: str, shown: str) -> None:
    assert redact_url(url) == shown and has_secret(url)
    assert redact_url(shown) == shown  # masking twice changes nothing


@pytest.mark.parametrize(
    "url", ["s3://bucket/p?endpoint=http://minio:9000&region=eu", "dir:///srv/x", "postgresql://postgres@db:5432/t"]
)
def test_redaction_leaves_urls_without_a_secret_alone(url: str) -> None:
    assert redact_url(url) == url and not has_secret(url)


def test_redaction_hides_paths_but_not_hosts() -> None:
    assert hide_paths('connection to server on socket "/run/postgresql/.s.PGSQL.5432" failed') == (
        'connection to server on socket "<path>" failed')  # fmt: skip
    assert hide_paths("postgresql:/var/run/postgresql:5432/engram") == "postgresql:<path>:5432/engram"
    assert hide_paths("cannot read /srv/engram/engram.db.remotes.json: bad") == "cannot read <path>: bad"
    assert hide_paths("[Errno 20] Not a directory: '/tmp/a/b'") == "[Errno 20] Not a directory: '<path>'"
    assert hide_paths("dir:///srv/backups") == "dir://<path>"
    for kept in ("redis:127.0.0.1:6379/0", "s3:http://minio:9000/bucket", "embedder:api.example.com", "1/2 done"):
        assert hide_paths(kept) == kept


def test_redaction_scrubs_nested_values_keeping_keys_apart() -> None:
    found = scrub_value({"postgresql:/a:5432/x": "open", "postgresql:/b:5432/x": ["s3://k:s@b"], "n": 1})
    assert found == {"postgresql:<path>:5432/x": "open", "postgresql:<path>:5432/x#2": ["s3://k:***@b"], "n": 1}
    assert scrub("s3://k:s@b at /srv/x") == "s3://k:***@b at <path>"
