"""Store URLs parsed once (engram.store.urls): every kind, tenant derivation, bad URLs, no password in errors."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

import engram
from engram.errors import ConfigError
from engram.store import tenant_url
from engram.store.connect import OPENERS, local_file
from engram.store.urls import SCHEMES, ChunkLocation, StoreUrl, check_tenant, conninfo_of, is_postgres

SECRET = "s3cr3t-pw"


def test_store_url_default_is_the_embedded_store() -> None:
    url = StoreUrl.parse(None)
    assert (url.kind, url.path, url.conninfo, url.redis) == ("sqlite", Path(".engram") / "engram.db", None, None)


def test_store_url_memory() -> None:
    url = StoreUrl.parse(":memory:")
    assert (url.kind, url.path, url.conninfo, url.replicas) == ("memory", None, None, ())


def test_store_url_sqlite_relative_and_absolute(tmp_path: Path) -> None:
    assert StoreUrl.parse("sqlite:///g.db").path == Path("g.db")
    assert StoreUrl.parse("sqlite:///data/g.sqlite").path == Path("data/g.sqlite")
    assert StoreUrl.parse("sqlite:////srv/g.db").path == Path("/srv/g.db")
    assert StoreUrl.parse(f"sqlite:///{tmp_path / 'x.db'}").path == tmp_path / "x.db"
    assert StoreUrl.parse("sqlite:///store").path == Path("store") / "engram.db"  # no SQLite suffix: a directory
    assert StoreUrl.parse("sqlite:///g.db").kind == "sqlite"


def test_store_url_plain_paths(tmp_path: Path) -> None:
    assert StoreUrl.parse(str(tmp_path)).path == tmp_path / "engram.db"
    assert StoreUrl.parse("rel/x.sqlite3").path == Path("rel/x.sqlite3")
    (tmp_path / "looks.db").mkdir()
    assert StoreUrl.parse(str(tmp_path / "looks.db")).path == tmp_path / "looks.db" / "engram.db"  # a directory


def test_open_sqlite_relative_url_is_in_the_working_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with engram.open("sqlite:///g.db", embedder=None) as mem:
        mem.put(("n",), "k", {"v": 1})
    assert (tmp_path / "g.db").is_file()
    absolute = tmp_path / "abs" / "h.db"
    absolute.parent.mkdir()
    with engram.open(f"sqlite:///{absolute}", embedder=None) as mem:
        mem.put(("n",), "k", {"v": 1})
    assert absolute.is_file() and not (tmp_path / str(absolute).lstrip("/")).exists()
    with engram.open("g.db", embedder=None) as mem:  # a plain path still works: the same file
        assert mem.get(("n",), "k") is not None


def test_store_url_postgres_parts() -> None:
    text = (
        "postgresql://app:pw@db:5433/engram?sslmode=require&repo=acme&redis=redis://cache:6379/0"
        "&replica=postgresql://app@standby/engram&chunks=s3://bucket/prefix&chunks_endpoint=http://minio:9000"
        "&chunks_region=eu-west-1&replica=postgresql://app@other/engram"
    )
    url = StoreUrl.parse(text)
    assert url.kind == "postgres" and url.text == text and url.path is None
    assert url.conninfo == "postgresql://app:pw@db:5433/engram?sslmode=require"
    assert (url.repo, url.redis) == ("acme", "redis://cache:6379/0")
    assert url.replicas == ("postgresql://app@standby/engram", "postgresql://app@other/engram")
    assert url.chunks == ChunkLocation("bucket", "/prefix", "http://minio:9000", "eu-west-1")
    assert [name for name, _ in url.options] == ["replica", "chunks", "chunks_endpoint", "chunks_region", "replica"]
    bare = StoreUrl.parse("postgres://app@db/engram")
    assert (bare.kind, bare.repo, bare.redis, bare.chunks, bare.replicas) == ("postgres", "default", None, None, ())
    assert bare.conninfo == "postgres://app@db/engram"
    assert StoreUrl.parse("postgresql://app@db/engram?redis=").redis is None


def test_store_url_every_scheme_has_an_opener() -> None:
    assert set(SCHEMES.values()) | {"memory"} == set(OPENERS)


def test_is_postgres_and_conninfo() -> None:
    assert is_postgres("postgresql://a@b/c") and is_postgres("postgres://a@b/c")
    assert not any(is_postgres(text) for text in (None, ":memory:", "/srv/engram", "sqlite:///x.db", "ftp://x"))
    assert conninfo_of("postgresql://a@b/c?repo=x&connect_timeout=1") == "postgresql://a@b/c?connect_timeout=1"
    with pytest.raises(ConfigError, match="not a PostgreSQL URL"):
        conninfo_of("sqlite:///x.db")


def test_store_url_tenant_derivation(tmp_path: Path) -> None:
    assert StoreUrl.parse(":memory:").tenant("acme") == ":memory:"
    assert StoreUrl.parse(str(tmp_path)).tenant("acme") == str(tmp_path / "tenants" / "acme" / "engram.db")
    assert StoreUrl.parse(None).tenant("acme") == str(Path(".engram") / "tenants" / "acme" / "engram.db")
    assert StoreUrl.parse("sqlite:///g.db").tenant("acme") == str(Path("tenants") / "acme" / "engram.db")
    derived = StoreUrl.parse("postgresql://app@db/engram?connect_timeout=3&repo=base&redis=redis://r/0").tenant("acme")
    assert derived == "postgresql://app@db/engram?connect_timeout=3&redis=redis://r/0&repo=acme"
    again = StoreUrl.parse(derived)
    assert (again.repo, again.redis, again.conninfo) == (
        "acme",
        "redis://r/0",
        "postgresql://app@db/engram?connect_timeout=3",
    )
    with_options = StoreUrl.parse(
        "postgresql://app@db/engram?replica=postgresql://app@standby/engram&chunks=s3://b/p"
    ).tenant("t-1")
    parsed = StoreUrl.parse(with_options)
    assert parsed.repo == "t-1" and parsed.chunks == ChunkLocation("b", "/p")
    assert parsed.replicas == ("postgresql://app@standby/engram?repo=t-1",)
    assert tenant_url("postgresql://app@db/engram", "acme") == "postgresql://app@db/engram?repo=acme"


@pytest.mark.parametrize("name", ["", "a b", "../up", "x/y", "a.b"])
def test_store_url_tenant_names_are_checked(name: str) -> None:
    with pytest.raises(ConfigError, match="invalid tenant name"):
        StoreUrl.parse(":memory:").tenant(name)
    with pytest.raises(ConfigError, match="invalid tenant name"):
        check_tenant(name)
    with pytest.raises(ConfigError, match="invalid tenant name"):
        tenant_url("ftp://bad", name)  # the name is checked first


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ftp://nope", "unsupported store URL"),
        ("mysql://root@db/x", "unsupported store URL"),
        ("", "empty store path"),
        ("sqlite://", "empty store path"),
        ("sqlite:///", "empty store path"),
        ("sqlite://host/x.db", "names no host"),
        ("postgresql://a@b/c?repo=x&repo=y", r"give \?repo= once"),
        ("postgresql://a@b/c?redis=redis://r&redis=redis://s", r"give \?redis= once"),
        ("postgresql://a@b/c?chunks=s3://b/p&chunks=s3://b/q", r"give \?chunks= once"),
        ("postgresql://a@b/c?chunks_endpoint=http://127.0.0.1:1", r"need \?chunks=s3://"),
        ("postgresql://a@b/c?chunks=http://elsewhere/x", r"takes s3://bucket/prefix"),
        ("postgresql://a@b/c?chunks=s3://", r"takes s3://bucket/prefix"),
    ],
)
def test_store_url_bad_urls_are_config_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        StoreUrl.parse(text)
    with pytest.raises(ConfigError, match=message):
        local_file(text)


@pytest.mark.parametrize(
    "text",
    [
        f"ftp://user:{SECRET}@host/x",
        f"mysql://root:{SECRET}@db/x",
        f"sqlite://user:{SECRET}@host/x.db",
        f"postgresql://a:{SECRET}@b/c?chunks=s3://KEY:{SECRET}@bucket/p?x=1",
    ],
)
def test_store_url_errors_never_show_a_password(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        StoreUrl.parse(text)
    assert SECRET not in str(caught.value) and "***" in str(caught.value)
    with pytest.raises(ConfigError) as opened:
        engram.open(text, embedder=None)
    assert SECRET not in str(opened.value)


def test_store_url_is_a_frozen_value() -> None:
    url = StoreUrl.parse("postgresql://a@b/c?repo=x")
    assert url == StoreUrl.parse("postgresql://a@b/c?repo=x") and hash(url) == hash(StoreUrl.parse(url.text))
    with pytest.raises(AttributeError):
        url.repo = "y"  # type: ignore[misc]
    assert dict(parse_qsl(urlsplit(url.tenant("z")).query)) == {"repo": "z"}
