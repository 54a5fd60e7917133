"""Fetch LangGraph's own store test suites from PyPI at test time (never copied into this repository).

The suites ship in the source distributions of the checkpoint packages. Each pinned sdist is downloaded
once with ``pip download --no-binary :all: --no-deps``, checked against its pinned sha256, and only its
``tests/`` directory is extracted, into ``.cache/langgraph-sdists/`` (``ENGRAM_LANGGRAPH_SDISTS``
overrides the place; the directory ignores itself in git). Repeated runs reuse the cache.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: distribution -> (version, sha256 of its sdist). The versions are the ones the dev environment installs:
#: a suite only means something against the library version it was written for.
PINS: dict[str, tuple[str, str]] = {
    "langgraph-checkpoint": ("4.3.2", "fcab8468c7e965d7055e2a35c253d73a145624ef4728b150ca7c361f4afca286"),
    "langgraph-checkpoint-sqlite": ("3.1.2", "4e3f376fa6f192d6ad2a1a4643b039986f1593552ef870e9e45281575de6fbf2"),
    "langgraph-checkpoint-postgres": ("3.2.0", "dffef0e6822d7c614019f7f2c4bdbef42859746aee2d3e6d9d9747cf3744ca90"),
}


def cache_dir() -> Path:
    """Where sdists and their extracted tests live."""
    return Path(os.environ.get("ENGRAM_LANGGRAPH_SDISTS") or ROOT / ".cache" / "langgraph-sdists")


def _unavailable(what: str, reason: str) -> NoReturn:
    """Skip the whole module, or fail it under ENGRAM_REQUIRE_SERVICES=1 (as in CI)."""
    if os.environ.get("ENGRAM_REQUIRE_SERVICES") == "1":
        raise RuntimeError(f"{what} is required (ENGRAM_REQUIRE_SERVICES=1) but unavailable: {reason}")
    pytest.skip(f"{what} is not available: {reason}", allow_module_level=True)


def check_installed(dist: str) -> None:
    """The suite of ``dist`` runs against the installed library: it must be the pinned version."""
    version = PINS[dist][0]
    try:
        installed = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        _unavailable(dist, f"not installed (pip install '{dist}=={version}')")
    if installed != version:
        raise RuntimeError(
            f"{dist} {installed} is installed but the conformance suite is pinned to {version}: "
            f"update PINS in {Path(__file__).name} (version and sdist sha256) or install {dist}=={version}"
        )


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """One process at a time downloads and extracts (several test runs may share the cache)."""
    with open(directory / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download(dist: str, version: str, directory: Path) -> Path:
    archive = directory / f"{dist.replace('-', '_')}-{version}.tar.gz"
    if archive.exists():
        return archive
    command = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
               "--disable-pip-version-check", "-q", f"{dist}=={version}", "-d", str(directory)]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    except subprocess.TimeoutExpired:
        _unavailable(f"PyPI ({dist} sdist)", "pip download timed out")
    if done.returncode != 0 or not archive.exists():
        _unavailable(f"PyPI ({dist} sdist)", (done.stderr or done.stdout).strip()[-500:] or "no archive")
    return archive


def _extract_tests(archive: Path, target: Path) -> None:
    """Extract ``<top>/tests/**`` of the sdist into ``target/tests`` (atomically)."""
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".extract-"))
    try:
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.name.split("/")[1:2] == ["tests"]]
            tar.extractall(staging, members=members, filter="data")
        (top,) = staging.iterdir()
        top.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def suite_dir(dist: str) -> Path:
    """The extracted ``tests/`` directory of the pinned sdist of ``dist``, downloading it if needed."""
    version, sha256 = PINS[dist]
    directory = cache_dir()
    target = directory / f"{dist}-{version}"
    if (target / ".complete").exists():
        return target / "tests"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / ".gitignore").write_text("# LangGraph test sdists, fetched by tests/langgraph_conformance\n*\n")
    with _locked(directory):
        if not (target / ".complete").exists():
            archive = _download(dist, version, directory)
            actual = _sha256(archive)
            if actual != sha256:
                archive.unlink()
                raise RuntimeError(f"{archive.name}: sha256 {actual} does not match the pinned {sha256}")
            shutil.rmtree(target, ignore_errors=True)
            _extract_tests(archive, target)
            (target / ".complete").write_text(f"{dist}=={version} sha256:{sha256}\n")
    return target / "tests"
