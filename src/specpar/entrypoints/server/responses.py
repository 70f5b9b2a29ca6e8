"""The OpenAI response bodies of one request: whole, or as server-sent event chunks; logprobs in OpenAI's forms."""

from __future__ import annotations

import codecs
import json

from specpar.core.token_text import token_name
from specpar.entrypoints.server.jobs import Plan
from specpar.entrypoints.server.schemas import id_text
from specpar.entrypoints.server.served import Served

FLOOR = -9999.0  # a removed token's log-probability (-inf) as JSON can carry it (vLLM's)


class Shape:
    """The bodies of one request ``rid`` to ``model``: chat or completions."""

    def __init__(self, rid: str, model: str, chat: bool, created: int, served: Served):
        self.rid, self.model, self.chat, self.created, self.served = rid, model, chat, created, served
        self.object = "chat.completion" if chat else "text_completion"
        self.chunk_object = "chat.completion.chunk" if chat else "text_completion"

    def head(self, object: str) -> dict:
        return {"id": self.rid, "object": object, "created": self.created, "model": self.model}

    @staticmethod
    def usage(plan: Plan, results) -> dict:
        n = sum(len(r.tokens) for r in results)
        return {"prompt_tokens": plan.prompt_tokens, "completion_tokens": n, "total_tokens": plan.prompt_tokens + n}

    def text(self, job, result) -> str:
        text = result.text if result.text is not None else id_text(result.tokens)
        return (job.echo or "") + text

    def whole(self, plan: Plan, results) -> dict:
        choices = []
        for job, r in zip(plan.jobs, results):
            logprobs = self.logprobs(r, len(job.echo or "")) if plan.logprobs is not None else None
            if self.chat:
                choice = {"index": job.index, "message": {"role": "assistant", "content": self.text(job, r)}}
            else:
                choice = {"index": job.index, "text": self.text(job, r)}
            choice |= {"logprobs": logprobs, "finish_reason": r.finish_reason, "token_ids": r.tokens}  # vLLM's ids
            choices.append(choice)
        return {**self.head(self.object), "choices": choices, "usage": self.usage(plan, results), **chosen(results)}

    def chunk(self, index: int, piece, finish_reason: str | None = None, logprobs=None) -> str:
        """One event: ``piece`` of choice ``index`` (text; for chat a delta dict, or None for an empty one)."""
        if self.chat:
            delta = piece if isinstance(piece, dict) else {} if piece is None else {"content": piece}
            choice = {"index": index, "delta": delta}
        else:
            choice = {"index": index, "text": piece or ""}
        choice |= {"logprobs": logprobs, "finish_reason": finish_reason}
        return self.event({**self.head(self.chunk_object), "choices": [choice]})

    def usage_chunk(self, plan: Plan, results) -> str:
        body = {**self.head(self.chunk_object), "choices": [], "usage": self.usage(plan, results), **chosen(results)}
        return self.event(body)

    @staticmethod
    def event(data: dict) -> str:
        return f"data: {json.dumps(data)}\n\n"

    def logprobs(self, result, offset: int = 0) -> dict:
        """A result's logprobs: chat's {"content": [...]} or completions' {"tokens", "token_logprobs", ...}.

        Each token is named by :meth:`Served.token` (its text, or OpenAI's ``bytes:`` form for a token that is part of
        a character), with its own bytes in chat's ``bytes``; ``text_offset``: where each token's text starts in the
        output's text (characters, counted by decoding the tokens' bytes in order)."""
        entries = result.logprobs or []
        if self.chat:
            return {"content": [{**self._entry(x.token, x.logprob),
                                 "top_logprobs": [self._entry(t, v) for t, v in x.top]} for x in entries]}  # fmt: skip
        token = self.served.token
        decoder, offsets, at = codecs.getincrementaldecoder("utf-8")("replace"), [], offset
        for x in entries:
            offsets.append(at)
            at += len(decoder.decode(self.served.token_bytes(x.token)))
        return {
            "tokens": [token(x.token) for x in entries],
            "token_logprobs": [max(x.logprob, FLOOR) for x in entries],
            "top_logprobs": [{token(t): max(v, FLOOR) for t, v in x.top} for x in entries],
            "text_offset": offsets,
        }

    def _entry(self, token: int, logprob: float) -> dict:
        data = self.served.token_bytes(token)
        return {"token": token_name(data), "logprob": max(logprob, FLOOR), "bytes": list(data)}


def chosen(results) -> dict:
    """The ``specpar`` field beside ``usage``: what ``algorithm="auto"`` ran, predicted and why (the first choice's;
    the choices of one request are predicted alike), with its measured generation time; none without auto."""
    auto = next((r for r in results if r.auto is not None), None)
    if auto is None:
        return {}
    return {"specpar": {**auto.auto, "measured_ms": auto.time_ms}}
