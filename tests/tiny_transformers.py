"""Tiny random-weight transformers models, built in the test (no downloads), in float64 so no greedy tie can flip."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from specpar.backends.transformers_model import TransformersModel

# Tiny models run fastest on one thread; with more, OpenMP's spinning workers cost 20x on a busy 2-core machine.
torch.set_num_threads(1)


def tiny_module(
    vocab: int = 64, seed: int = 0, layers: int = 2, context: int = 256, scale: float = 1.0, arch: str = "qwen2"
):
    """A random Qwen2 (or Llama) causal LM in float64; ``scale`` multiplies the output embedding (larger: more peaked)."""
    torch.manual_seed(seed)
    Config, Model = (Qwen2Config, Qwen2ForCausalLM) if arch == "qwen2" else (LlamaConfig, LlamaForCausalLM)
    cfg = Config(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        eos_token_id=None,
        bos_token_id=None,
        pad_token_id=None,
        tie_word_embeddings=False,
    )
    module = Model(cfg).to(torch.float64).eval()
    with torch.no_grad():
        for p in module.parameters():  # wider weights than the default init: logits far apart
            p.mul_(3.0)
        module.lm_head.weight.mul_(scale)
    return module


def perturbed(module, noise: float, seed: int):
    """A drafter: a copy of ``module`` with Gaussian noise of relative size ``noise`` on every weight."""
    import copy

    torch.manual_seed(seed)
    out = copy.deepcopy(module)
    with torch.no_grad():
        for p in out.parameters():
            p.add_(noise * p.std() * torch.randn_like(p) if p.numel() > 1 else 0)
    return out


def with_rows(module, rows: int):
    """``module`` (a copy) with ``rows`` rows in its input and output embeddings: the first rows kept, rows beyond
    the original added (transformers' own initialization: padding with some probability), others cut off. A drafter
    whose vocabulary differs from its target's only by padding, as Qwen2.5-0.5B's 151,936 rows vs 7B's 152,064."""
    import copy

    out = copy.deepcopy(module)
    torch.manual_seed(rows)
    out.resize_token_embeddings(rows, mean_resizing=False)
    return out


def tiny_pair(vocab: int = 64, seed: int = 0, noise: float = 0.3, latencies=(None, None), **kw):
    """(target, drafter) TransformersModels; latencies: their LatencyProfiles for the virtual clock."""
    target = tiny_module(vocab, seed, **kw)
    drafter = perturbed(target, noise, seed + 1)
    return (
        TransformersModel(target, name="tiny-target", latency=latencies[0]),
        TransformersModel(drafter, name="tiny-drafter", latency=latencies[1]),
    )


def reference_greedy(model: TransformersModel, prompt: list[int], n: int) -> list[int]:
    """The target's own greedy decoding with transformers' ``generate``.

    Every prompt token is attended to, token 0 included: without an explicit attention mask ``generate`` would
    infer one from the pad id and mask the prompt's 0s out.
    """
    module = model.module_on("cpu")
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = module.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )
    return out[0, len(prompt) :].tolist()


def tiny_tokenizer(vocab: int):
    """A word-level tokenizer over words w0 .. w{vocab-1} (no special tokens), as a PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def save_tiny_pair(directory, vocab: int = 48, seed: int = 5, noise: float = 0.1) -> tuple[str, str]:
    """Write a tiny target and drafter (float64 weights + tokenizer) to directory/target and directory/drafter.

    Llama, not Qwen2: transformers would load the word-level tokenizer as a Qwen2 BPE tokenizer.
    """
    target = tiny_module(vocab, seed, context=128, arch="llama")
    drafter = perturbed(target, noise, seed + 1)
    paths = []
    for name, module in (("target", target), ("drafter", drafter)):
        path = str(directory / name)
        module.save_pretrained(path)
        tiny_tokenizer(vocab).save_pretrained(path)
        paths.append(path)
    return paths[0], paths[1]


def tiny_model(role: str = "target", vocab: int = 64, seed: int = 0, noise: float = 0.3, **kw) -> TransformersModel:
    """tiny_pair's target or drafter alone, with a ``factory`` that builds it again (in a Ray actor: the same
    weights from the same seeds, none sent)."""
    import functools

    module = tiny_module(vocab, seed, **kw)
    if role == "drafter":
        module = perturbed(module, noise, seed + 1)
    factory = functools.partial(tiny_model, role, vocab, seed, noise, **kw)
    return TransformersModel(module, name=f"tiny-{role}", factory=factory)


def burn(seconds: float) -> None:
    """Keep this thread inside torch's C++ code (matrix products, the GIL released) for ``seconds``: what a large
    model's forward pass does."""
    import time

    a = torch.ones(128, 128)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        a @ a


def slow_down(module, tree_s: float, plain_s: float):
    """Make ``module``'s forward pass first spend ``tree_s`` (a tree pass: one with an attention mask) or
    ``plain_s`` (any other) inside torch: a large model's passes, in a tiny one (returns the module)."""
    if getattr(module, "slowed_down", False):
        return module
    forward = module.forward

    def slow_forward(*args, **kwargs):
        burn(tree_s if "attention_mask" in kwargs else plain_s)
        return forward(*args, **kwargs)

    module.forward = slow_forward
    module.slowed_down = True
    return module


def slowed(module_on, tree_s: float, plain_s: float, who: str = "target"):
    """A TransformersModel.module_on whose modules, for models named ``who...``, are slowed down (slow_down): for
    tests that load models from disk (the command line), so that every server of the target has slow passes."""

    def slow_module_on(self, device):
        module = module_on(self, device)
        return slow_down(module, tree_s, plain_s) if self.name.startswith(who) else module

    return slow_module_on
