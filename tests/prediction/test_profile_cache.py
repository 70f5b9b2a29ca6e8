"""The machine profile's cache (prediction/profile_cache.py, machine.load_or_build): measured on first need, read
back after; a changed model file, backend setting or machine measures again; a corrupt file is measured again with
one warning; a model held in memory is never kept."""

from __future__ import annotations

import json
import warnings

import pytest

from specpar import SimulatedModel
from specpar.core.errors import SpecparWarning
from specpar.core.latency import LatencyProfile
from specpar.prediction import profile_cache
from specpar.prediction.machine import MachineProfile, load_or_build
from specpar.prediction.measure_pair import MeasureOptions

PROMPTS = [[1, 2, 3, 4, 5, 6]]
OPTIONS = MeasureOptions(tokens=12, max_pass=6, repeats=1, runtime="virtual", overheads=())


class FileModel(SimulatedModel):
    """A simulated model that says it comes from a file and runs with settings (as a GGUF on llama.cpp does)."""

    def __init__(self, path, settings: dict, tpot: float):
        super().__init__(32, seed=0, latency=LatencyProfile(4 * tpot, tpot, tpot / 5))
        self.path, self.settings, self.name = str(path), settings, f"file-{tpot}"

    def backend_settings(self) -> dict:
        return {"backend": "test", **self.settings}


@pytest.fixture
def models(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECPAR_CACHE", str(tmp_path / "cache"))
    files = []
    for name, size in (("target.bin", 3 << 20), ("drafter.bin", 1000)):
        path = tmp_path / name
        path.write_bytes(bytes(range(256)) * (size // 256))
        files.append(path)
    target = FileModel(files[0], {"exact": True}, 10.0)
    drafter = FileModel(files[1], {"exact": True}, 2.0)
    return target, drafter, files


def build(target, drafter) -> tuple[MachineProfile, int]:
    """The profile and how many measuring steps ran to get it (0: read from the cache)."""
    steps = []
    profile = load_or_build(target=target, drafter=drafter, prompts=PROMPTS, options=OPTIONS, progress=steps.append)
    return profile, len(steps)


def test_measured_on_first_need_then_read_from_the_cache(models):
    target, drafter, _ = models
    first, steps = build(target, drafter)
    assert steps == OPTIONS.steps(len(PROMPTS), first.cores) and first.target.pass_cost(1, 1) == 10.0
    again, steps = build(target, drafter)
    assert steps == 0 and again == first
    path = profile_cache.cache_path(first.key)
    assert path.is_file() and json.loads(path.read_text())["key"] == json.loads(json.dumps(first.key))


def test_a_changed_model_file_setting_or_machine_is_measured_again(models, monkeypatch):
    target, drafter, files = models
    first, _ = build(target, drafter)
    data = bytearray(files[0].read_bytes())
    data[-1] ^= 1  # the file's last byte: its size and first MiB unchanged
    files[0].write_bytes(bytes(data))
    changed, steps = build(target, drafter)
    assert steps > 0 and changed.key["target"]["files"] != first.key["target"]["files"]
    assert build(target, drafter)[1] == 0  # the new file's profile is now kept
    drafter.settings = {"exact": False}  # llama.cpp's fast mode, say
    assert build(target, drafter)[1] > 0
    with monkeypatch.context() as m:
        m.setattr(profile_cache, "_cpu_model", lambda: "another CPU")
        other, steps = build(target, drafter)
    assert steps > 0 and other.key["cpu"] == "another CPU"
    # back on the first machine with the first settings: that profile is still kept
    drafter.settings = {"exact": True}
    assert build(target, drafter)[1] == 0


def test_a_corrupt_cache_file_is_measured_again_with_one_warning(models):
    target, drafter, _ = models
    first, _ = build(target, drafter)
    path = profile_cache.cache_path(first.key)
    for corrupt in (b"{not json", b"\xff\xfe\x00", json.dumps({"key": first.key, "target": 5}).encode()):
        path.write_bytes(corrupt)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            again, steps = build(target, drafter)
        assert [w.category for w in caught] == [SpecparWarning] and "measuring it again" in str(caught[0].message)
        assert steps > 0 and again == first and MachineProfile.from_dict(json.loads(path.read_text())) == first


def test_a_model_held_in_memory_is_measured_each_time_and_not_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECPAR_CACHE", str(tmp_path / "cache"))
    target = SimulatedModel(32, seed=0, latency=LatencyProfile(20.0, 5.0, 1.0))
    drafter = target.drafter(0.8, LatencyProfile.uniform(1.0))
    assert not profile_cache.cacheable(profile_cache.profile_key(target, drafter, OPTIONS.measurement(PROMPTS)))
    assert build(target, drafter)[1] > 0 and build(target, drafter)[1] > 0
    assert not (tmp_path / "cache").exists()


def test_fingerprints_read_the_ends_of_a_file_and_every_file_of_a_folder(tmp_path):
    a = tmp_path / "a" / "model.bin"
    a.parent.mkdir()
    a.write_bytes(b"x" * (5 << 20))
    before = profile_cache.fingerprint(a), profile_cache.fingerprint(a.parent)
    a.write_bytes(b"x" * (5 << 20) + b"y")
    assert profile_cache.fingerprint(a) != before[0] and profile_cache.fingerprint(a.parent) != before[1]
    (a.parent / "config.json").write_text("{}")
    assert profile_cache.fingerprint(a.parent) != profile_cache.fingerprint(a)  # the folder: its files, by name


@pytest.mark.slow  # llama.cpp
def test_a_gguf_models_key_names_its_llama_settings(tmp_path):
    pytest.importorskip("llama_cpp")
    from specpar.backends.llama.model import LlamaModel
    from specpar.backends.llama.settings import LlamaSettings
    from tiny_gguf import write_tiny_gguf

    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    exact = profile_cache.model_key(LlamaModel(path))
    fast = profile_cache.model_key(LlamaModel(path, exact=False))
    with pytest.warns(SpecparWarning, match="not bitwise exact"):
        broken = profile_cache.model_key(LlamaModel(path, settings=LlamaSettings(ubatch=512)))
    assert exact["files"] == fast["files"] == broken["files"] == profile_cache.fingerprint(path)
    assert (exact["settings"]["mode"], fast["settings"]["mode"], broken["settings"]["mode"]) == (
        "exact",
        "fast",
        "exact",
    )
    assert exact["settings"]["exact"] and not fast["settings"]["exact"] and not broken["settings"]["exact"]
    assert (exact["settings"]["ubatch"], broken["settings"]["ubatch"]) == (LlamaSettings().pass_limit, 512)
    assert exact["settings"]["backend"] == "llama" and "build" in exact["settings"]


def test_each_measurement_has_its_own_entry_and_the_default_one_is_never_overwritten_by_another(models):
    """`specpar profile -N 12 --max-pass 6 --prompts 1 --dataset X` measures with refresh=True: into its own entry,
    never into the one measured otherwise (before, the key left the measurement out: the second build below read the
    first's entry, and a refreshed one overwrote it)."""
    target, drafter, _ = models
    first, _ = build(target, drafter)
    other = MeasureOptions(tokens=10, max_pass=6, repeats=1, runtime="virtual", overheads=())
    for options, prompts in ((other, PROMPTS), (OPTIONS, [[9, 8, 7, 6]])):
        steps = []
        again = load_or_build(target=target, drafter=drafter, prompts=prompts, options=options,
                              progress=steps.append, refresh=True)  # fmt: skip
        assert steps and again.key["measure"] != first.key["measure"]
        assert profile_cache.cache_path(again.key) != profile_cache.cache_path(first.key)
    kept, steps = build(target, drafter)
    assert steps == 0 and kept == first and kept.meta["tokens"] == OPTIONS.tokens


def test_a_ray_engine_never_predicts_a_ray_call_free_when_ray_was_not_measured(models):
    """A profile measured without Ray's round trip, asked for a Ray engine, assumes RAY_CALL_MS with one warning (the
    control: the profile as measured prices a Ray call at 0.0); measured or not asked for, it is left alone."""
    from specpar.prediction.machine import RAY_CALL_MS

    target, drafter, _ = models
    profile, _ = build(target, drafter)
    assert profile.meta["overheads_measured"] == [] and profile.overhead_ms["ray"] == 0.0  # the control
    with pytest.warns(SpecparWarning, match="did not measure a Ray call"):
        on_ray = profile.for_runtime("ray")
    assert on_ray.overhead_ms["ray"] == RAY_CALL_MS > 0 and on_ray.overhead_ms["threads"] == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert profile.for_runtime("threads") is profile
        measured = MachineProfile.from_dict({**profile.to_dict(), "meta": {"overheads_measured": ["ray"]}})
        assert measured.for_runtime("ray") is measured
    hand_written = {k: v for k, v in profile.to_dict().items() if k != "meta"}
    hand_written["overhead_ms"] = {"threads": 0.02}  # no "ray": not measured
    with pytest.warns(SpecparWarning, match="did not measure a Ray call"):
        assert MachineProfile.from_dict(hand_written).for_runtime("ray").overhead_ms["ray"] == RAY_CALL_MS
