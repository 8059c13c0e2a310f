"""The chat-completions service behind the HTTP layer: a model in the slot engine, grammars
compiled in worker processes behind a cache, and each request's events turned into an OpenAI
reply, whole or streamed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import jax

import ananke_jax as aj
from ananke_jax import models
from ananke_jax._src.gguf_file import read_gguf
from ananke_jax._src.server.chat import ChatTemplate
from ananke_jax._src.server.compiling import CompileWorkers, GrammarCache, refusal
from ananke_jax._src.server.limits import Limits
from ananke_jax._src.server.metrics import Metrics
from ananke_jax._src.server.openai_types import ChatCompletionRequest
from ananke_jax._src.server.replies import Detokenizer, Parts, Reply
from ananke_jax._src.server.scheduler import Scheduler
from ananke_jax._src.server.specs import RequestError, Spec, request_spec
from ananke_jax._src.serving.engine import Engine
from ananke_jax._src.serving.pool import GrammarPool
from ananke_jax._src.structural.tools import call_marker

log = logging.getLogger(__name__)


@dataclasses.dataclass
class ServedModel:
    """A model as the server runs it: ``name`` (its id in the API), the step function and its
    parameters, the vocabulary, ``encode`` (prompt text -> ids), and the chat template (which
    knows the model's tool-call style)."""

    name: str
    step_fn: Callable
    params: Any
    vocab: aj.Vocabulary
    encode: Callable[[str], list[int]]
    template: ChatTemplate


def load_model(model: str = "smollm2", tool_style: str | None = None) -> ServedModel:
    """``"smollm2"`` (SmolLM2-135M-Instruct), a ``.gguf`` file, or ``"tiny"``: a small random
    Llama with SmolLM2's vocabulary and template, which writes nonsense fast (for trying the API
    and for tests). The tool-call style is read from the chat template unless given."""
    path = models.smollm2_path() if model in ("smollm2", "tiny") else model
    if not os.path.isfile(path) or not path.endswith(".gguf"):
        raise ValueError(f"--model {model}: not smollm2, tiny or an existing .gguf file")
    metadata = read_gguf(path, aj.VocabularyError).metadata
    source = metadata.get("tokenizer.chat_template")
    tokens = metadata.get("tokenizer.ggml.tokens", [])
    special = {
        f"{role}_token": tokens[metadata[f"tokenizer.ggml.{role}_token_id"]]
        for role in ("bos", "eos")
        if f"tokenizer.ggml.{role}_token_id" in metadata
    }
    style = tool_style or _tool_style(source or "", smollm2=model in ("smollm2", "tiny"))
    vocab, tokenizer = aj.Vocabulary.from_gguf(path), models.gguf_tokenizer(path)
    if model == "tiny":
        config = models.LlamaConfig.tiny(vocab.logits_width)
        params, name = models.init_params(config, jax.random.key(0)), "tiny-random"
    else:
        config, params = models.load_gguf(path)
        name = "SmolLM2-135M-Instruct" if model == "smollm2" else os.path.basename(path).removesuffix(".gguf")
    encode = lambda text: tokenizer.encode(text).ids
    return ServedModel(name, models.make_step_fn(config), params, vocab, encode, ChatTemplate(source, style, **special))


def _tool_style(template: str, smollm2: bool) -> str:
    """The tool-call style a chat template shows (SmolLM2's own is its model card's)."""
    if smollm2:
        return "smollm2"
    if "[TOOL_CALLS]" in template:
        return "mistral"
    if "<|python_tag|>" in template or "ipython" in template:
        return "llama3"
    return "hermes"


class Service:
    """The model in an `Engine` of ``slots`` rows of ``max_len`` positions (prompts padded to
    ``prefill_buckets``: `Engine`'s), ``compile_workers``
    processes compiling grammars behind a cache of ``cache_size`` constraints, and the metrics.
    Made once per server; `close` stops its threads and processes."""

    def __init__(
        self,
        model: ServedModel,
        *,
        slots: int = 8,
        max_len: int = 1024,
        limits: Limits = Limits(),
        compile_workers: int = 2,
        cache_size: int = 256,
        pool: str = "default",
        steps_per_call: int = 1,
        prefill_buckets: tuple[int, ...] | None = None,
    ):
        self.model, self.limits, self.metrics = model, limits, Metrics()
        vocab = model.vocab
        workers = CompileWorkers(vocab, compile_workers, limits.compile, on_compiled=self.metrics.compile_seconds.observe)
        grammar_pool = GrammarPool(len(vocab), vocab.logits_width, vocab.eos_token_ids, pool)
        self.engine = Engine(
            model.step_fn,
            model.params,
            vocab,
            slots,
            max_len,
            pool=grammar_pool,
            steps_per_call=steps_per_call,
            prefill_buckets=prefill_buckets,
        )
        workers.wait_ready()
        self.cache = GrammarCache(workers, cache_size)
        self.metrics.cache = self.cache
        self.scheduler = Scheduler(self.engine, self.metrics)
        self.started = int(time.time())

    def close(self) -> None:
        self.scheduler.close()
        self.cache.workers.close()

    @property
    def prompt_limit(self) -> int:
        return min(self.engine.buckets[-1], self.engine.max_len - 1)

    async def start(self, body: ChatCompletionRequest) -> _Completion:
        """Take ``body`` and wait for its first token; then the `_Completion` gives the reply,
        whole or streamed.

        Raises:
          RequestError: the request is refused (with its HTTP status), before any token.
        """
        arrival = time.perf_counter()
        completion = None
        try:
            completion = await self._submit(body)
            await completion.first_event()
        except BaseException as e:
            if completion is not None:
                completion.cancel()
            if isinstance(e, RequestError):
                self.metrics.errors.labels(str(e.status)).inc()
            raise
        self.metrics.time_to_first_token.observe(time.perf_counter() - arrival)
        return completion

    async def _submit(self, body: ChatCompletionRequest) -> _Completion:
        if body.model != self.model.name:
            raise RequestError(
                404,
                f"the model {body.model!r} does not exist: this server serves {self.model.name!r}",
                param="model",
                code="model_not_found",
            )
        self._check(body)
        param, spec = request_spec(body, self.model.template.tool_style, self.limits.max_whitespace)
        prompt = self.model.encode(self.model.template.render(body.messages, body.tool_dicts, reasoning=spec.reasoning_chars is not None))
        max_new = self._max_new_tokens(len(prompt), body.max_completion_tokens or body.max_tokens)
        try:
            sampling = aj.SamplingParams(body.temperature, body.top_k, body.top_p, body.min_p, body.repetition_penalty)
        except ValueError as e:
            raise RequestError(400, str(e)) from None
        try:
            constraint = await self._constraint(spec)
        except RequestError as e:
            raise RequestError(e.status, e.message, param=e.param or param, code=e.code) from None
        completion = _Completion(self, body, spec, len(prompt))
        seed = body.seed if body.seed is not None else secrets.randbits(31)
        completion.ticket = self.scheduler.submit(completion.sink, prompt, constraint, max_new, sampling, seed % (1 << 31))
        self.metrics.prompt_tokens.inc(len(prompt))
        return completion

    def _check(self, body: ChatCompletionRequest) -> None:
        """Refuse fields the server cannot honour, or that ask more than its limits."""
        if (why := body.unsupported()) is not None:
            raise RequestError(400, f"unsupported: {why}", param=why.split(":")[0])
        stops, limits = body.stop_strings, self.limits
        if len(stops) > limits.max_stops or any(len(stop) > limits.max_stop_chars for stop in stops):
            raise RequestError(400, f"stop: at most {limits.max_stops} strings of at most {limits.max_stop_chars} characters", param="stop")
        if (body.max_reasoning_chars or 0) > limits.max_reasoning_chars:
            raise RequestError(
                400, f"max_reasoning_chars is over this server's limit of {limits.max_reasoning_chars}", param="max_reasoning_chars"
            )

    def _max_new_tokens(self, prompt: int, asked: int | None) -> int:
        if prompt > self.prompt_limit:
            raise RequestError(
                400, f"the prompt has {prompt} tokens; this server takes prompts of at most {self.prompt_limit}", param="messages"
            )
        room = self.engine.max_len - prompt
        if asked is None:
            return min(room, self.limits.max_tokens)
        if asked > self.limits.max_tokens:
            raise RequestError(400, f"max_tokens={asked} is over this server's limit of {self.limits.max_tokens}", param="max_tokens")
        if asked > room:
            raise RequestError(
                400,
                f"this model's context holds {self.engine.max_len} tokens: the prompt takes {prompt} and max_tokens asks for {asked}",
                param="max_tokens",
            )
        return asked

    async def _constraint(self, spec: Spec):
        if spec.free:
            return None
        future = self.cache.get(spec)
        self.metrics.compiling += 1
        try:
            return await asyncio.shield(asyncio.wrap_future(future))  # the compile is shared: a request that leaves leaves it be
        except RequestError as e:
            raise refusal(e) from None
        finally:
            self.metrics.compiling -= 1


def _event(payload) -> bytes:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()


class _Completion:
    """One request's reply as its events arrive (through ``sink``, from the engine's thread)."""

    def __init__(self, service: Service, body: ChatCompletionRequest, spec: Spec, prompt_tokens: int):
        self.service, self.body, self.tools, self.prompt_tokens = (
            service,
            body,
            spec.payload["tools"] if spec.kind == "tools" else None,
            prompt_tokens,
        )
        self.id, self.created, self.ticket = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), None
        self.finish_reason, self.tokens = None, 0
        self.style = service.model.template.tool_style
        self.reply = Reply(body.stop_strings, spec.reasoning_chars is not None, call_marker(self.style) if self.tools else None)
        self.detokenizer = Detokenizer(service.model.vocab)
        self._events: asyncio.Queue = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._first = None

    def sink(self, item) -> None:
        """Called from the engine's thread with each event (or a `RequestError`)."""
        with contextlib.suppress(RuntimeError):  # the event loop has closed: nobody waits any more
            self._loop.call_soon_threadsafe(self._events.put_nowait, item)

    def cancel(self) -> None:
        """End the request in the engine, unless it has finished."""
        if self.ticket is not None and self.finish_reason is None:
            self.service.scheduler.cancel(self.ticket)

    def header(self, kind: str) -> dict:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.service.model.name}

    async def first_event(self) -> None:
        """Wait for the first token (the request then runs); raises a refusal from the engine."""
        self._first = await self._next()

    async def _next(self):
        item = await self._events.get()
        if isinstance(item, Exception):
            raise item
        return item

    async def _parts(self) -> AsyncIterator[Parts]:
        """The reply's parts after each event, the last ones final."""
        event, metrics = self._first, self.service.metrics
        while True:
            self.tokens += len(event.tokens)
            metrics.generation_tokens.inc(len(event.tokens))
            parts = self.reply.split(self.detokenizer.add(event.tokens, final=event.finished), final=event.finished)
            if parts.stopped or event.finished:
                self.cancel()  # a stop string ended a request still running
                self.finish_reason = "length" if event.finish_reason == "length" and not parts.stopped else "stop"
                metrics.requests.labels(event.finish_reason or "stop").inc()
                if event.finish_reason == "constraint_error":
                    log.warning("request %s: no token continues its constraint; ended as 'stop'", self.id)
                yield parts
                return
            yield parts
            event = await self._next()

    def _calls(self, parts: Parts) -> tuple[str, list[dict]]:
        """The content and the parsed tool calls (none: their text, if any, stays content)."""
        if not parts.calls:
            return parts.content, []
        try:
            calls = aj.parse_tool_calls(parts.calls, self.tools, self.style)
        except ValueError:
            return parts.content + parts.calls, []
        if calls and self.finish_reason == "stop":
            self.finish_reason = "tool_calls"
        return parts.content, [
            {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
            for name, arguments in calls
        ]

    def _usage(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.tokens, "total_tokens": self.prompt_tokens + self.tokens}

    def _chunk(self, delta: dict, finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return _event({**self.header("chat.completion.chunk"), "choices": [choice]})

    async def whole(self, disconnected: Callable[[], Awaitable[bool]]) -> dict:
        """The ``chat.completion``; the request ends early if ``disconnected()`` turns true."""
        try:
            async for latest in self._parts():
                parts = latest
                if await disconnected():
                    break
        finally:
            self.cancel()
        content, calls = self._calls(parts)
        message: dict[str, Any] = {"role": "assistant", "content": content if content.strip() or not calls else None}
        if calls:
            message["tool_calls"] = calls
        if parts.reasoning is not None:
            message["reasoning_content"] = parts.reasoning
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": self.finish_reason}
        return {**self.header("chat.completion"), "choices": [choice], "usage": self._usage()}

    async def stream(self) -> AsyncIterator[bytes]:
        """The server-sent events of the reply's chunks; an error after the first ends the stream
        with an error event."""
        sent = {"reasoning_content": 0, "content": 0}
        try:
            yield self._chunk({"role": "assistant", "content": ""})
            async for parts in self._parts():
                final = self.finish_reason is not None
                content, calls = self._calls(parts) if final else (parts.content, [])
                delta = {}
                for key, text in (("reasoning_content", parts.reasoning), ("content", content)):
                    if text is not None and len(text) > sent[key]:
                        delta[key], sent[key] = text[sent[key] :], len(text)
                if calls:
                    delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(calls)]
                if delta:
                    yield self._chunk(delta)
            yield self._chunk({}, self.finish_reason)
            if self.body.stream_options is not None and self.body.stream_options.include_usage:
                yield _event({**self.header("chat.completion.chunk"), "choices": [], "usage": self._usage()})
            yield b"data: [DONE]\n\n"
        except RequestError as e:
            yield _event({"error": {"message": e.message, "type": "server_error", "param": None, "code": e.code}})
            yield b"data: [DONE]\n\n"
        finally:
            self.cancel()  # the client went away, or the engine failed
