"""Shared types every layer uses (docs/design.md, layer 7): calls and their results, decoding and sampling parameters,
generation results, stopping, logits processors, the token tree, latency profiles, errors."""
