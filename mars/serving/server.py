"""``mars serve``: an OpenAI-compatible HTTP endpoint over the continuous-batching MARS decoder.

    mars serve --model CKPT [--config config.yaml] [--port 8000] [--method mars] [--load-policy 0:1.0,4:0.95,8:0.9]

    POST /v1/completions        {"prompt": "...", "max_tokens": 64, "stream": false, "stop": [...], "tau": 0.9}
    POST /v1/chat/completions   {"messages": [{"role": "user", "content": "..."}], ...}   (the model's chat template)
    GET  /v1/models, GET /health

Decoding is greedy (``temperature`` absent or 0): MARS's multi-token mode is a greedy method. ``tau`` is this
project's extension field: a request that sets it keeps it; the others get the tau of the declared load policy
(config section ``serve.load_policy``: tau 1.0 when idle, lower as the load grows), re-read before every forward,
where the load is the number of requests decoding or waiting. Responses carry a ``mars`` field: the tau of the last
forward, the request's forwards and tokens per forward.

One scheduler thread owns the model and the :class:`~mars.serving.batcher.ContinuousBatcher`: between two forwards
it admits waiting requests (up to ``max_batch`` decode together), drops cancelled ones (a streaming client that
went away) and sets the policy's tau; the HTTP handlers only queue requests and read their events. A bad request is
an HTTP 400 with one message (OpenAI's error shape), and so is an OpenAI or vLLM sampling setting that is not
neutral (top_p, top_k, min_p, penalties, ignore_eos, min_tokens, logprobs, echo, logit_bias, ...; fields it does not
know are ignored); a request naming another ``model`` than the one served is HTTP 404 with OpenAI's
``model_not_found`` code (a request naming none gets the one served, as vLLM answers it), and a body not sent as
``Content-Type: application/json`` is HTTP 415, never guessed at; shutting the server down stops the thread after
its forward, ends every open request and answers new ones with HTTP 503. A stream asked with
``stream_options: {"include_usage": true}`` ends with OpenAI's usage chunk (no choices), which is how load-test
clients such as ``vllm bench serve`` count tokens.
"""

import asyncio
import json
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field

from mars.pipeline.config import ConfigError, schema_defaults

STREAM_DONE = "data: [DONE]\n\n"


def parse_load_policy(text: str) -> list[dict]:
    """``"0:1.0,4:0.95"`` -> [{"min_load": 0, "tau": 1.0}, {"min_load": 4, "tau": 0.95}]."""
    try:
        policy = [{"min_load": int(a), "tau": float(b)} for a, b in (part.split(":") for part in text.split(","))]
    except ValueError:
        raise ConfigError(f"--load-policy wants LOAD:TAU,LOAD:TAU,... (e.g. 0:1.0,4:0.95); got {text!r}") from None
    return policy


def check_load_policy(policy: list[dict]) -> list[dict]:
    policy = sorted(policy, key=lambda p: p["min_load"])
    if not policy or policy[0]["min_load"] != 0:
        raise ConfigError("the load policy's first entry must have min_load 0 (the tau of an idle server)")
    if any(not 0 < p["tau"] <= 1 for p in policy):
        raise ConfigError("every tau of the load policy must be in (0, 1]")
    if len({p["min_load"] for p in policy}) < len(policy):
        raise ConfigError("the load policy names a min_load twice")
    return policy


def policy_tau(policy: list[dict], load: int) -> float:
    """The tau of the entry with the largest min_load <= load (the policy is sorted)."""
    tau = policy[0]["tau"]
    for entry in policy:
        if entry["min_load"] <= load:
            tau = entry["tau"]
    return tau


class BadRequest(Exception):
    """One clear message, answered as HTTP 400."""


class Unavailable(Exception):
    """One clear message, answered as HTTP 503 (the server is shutting down)."""


@dataclass
class Request:
    prompt_ids: list[int]
    max_tokens: int
    tau: float | None  # None: the load policy's
    stop: list[str]
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    rid: int | None = None  # the batcher's id, once admitted
    cancelled: bool = False
    created: float = field(default_factory=time.time)


class ServeEngine:
    """The scheduler thread and what the handlers call (module docstring)."""

    def __init__(self, model, tokenizer, *, method: str, block_size: int, max_batch: int, load_policy: list[dict]):
        from mars.serving.batcher import ContinuousBatcher

        self.tokenizer = tokenizer
        self.policy = check_load_policy(load_policy)
        self.max_batch = max_batch
        self.method = method
        self.batcher = ContinuousBatcher(
            model,
            method=method,
            block_size=block_size,
            eos_token_ids=[tokenizer.eos_token_id],
            pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
            mask_token_id=tokenizer.mask_token_id,
        )
        self.max_positions = getattr(model.config, "max_position_embeddings", None)
        self.incoming: queue.Queue[Request] = queue.Queue()
        self.waiting: list[Request] = []
        self.running: dict[int, Request] = {}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="mars-serve-scheduler", daemon=True)
        self.last_tau = policy_tau(self.policy, 0)
        # since start: forwards, tokens they decoded, seconds inside them, and request rows decoded per tau (GET
        # /health; the load test's split of the server's time, and which tau the load policy actually applied)
        self.counters = {"forwards": 0, "tokens": 0, "forward_seconds": 0.0, "rows_by_tau": {}}

    # -- called by the handlers (event loop thread) --------------------------------------------------------------
    def submit(self, request: Request) -> None:
        if self.stopping.is_set():
            raise Unavailable("the server is shutting down")
        self.incoming.put(request)

    def cancel(self, request: Request) -> None:
        request.cancelled = True  # the scheduler drops it before its next forward

    @property
    def load(self) -> int:
        return len(self.running) + len(self.waiting) + self.incoming.qsize()

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=60)

    # -- the scheduler thread -----------------------------------------------------------------------------------
    def _emit(self, request: Request, event: dict) -> None:
        try:
            request.loop.call_soon_threadsafe(request.events.put_nowait, event)
        except RuntimeError:  # its event loop is closed (the server is gone): nobody is waiting for it
            pass

    def _loop(self) -> None:
        try:
            while not self.stopping.is_set():
                self._admit(block=not self.running)
                for rid, request in list(self.running.items()):
                    if request.cancelled:
                        self.batcher.cancel(rid)
                        del self.running[rid]
                if not self.running:
                    continue
                tau = policy_tau(self.policy, self.load)
                self.last_tau = tau
                rows_by_tau = self.counters["rows_by_tau"]
                for rid, request in self.running.items():
                    row_tau = float(request.tau if request.tau is not None else tau)  # (1 and 1.0: one key)
                    self.batcher.set_tau(rid, row_tau)
                    rows_by_tau[str(row_tau)] = rows_by_tau.get(str(row_tau), 0) + 1
                start = time.perf_counter()
                events = self.batcher.step()
                self.counters["forward_seconds"] += time.perf_counter() - start
                self.counters["forwards"] += 1
                self.counters["tokens"] += sum(len(event.tokens) for event in events)
                for event in events:
                    request = self.running.get(event.request)
                    if request is None:
                        continue
                    if event.finished:
                        del self.running[event.request]
                    self._emit(request, {"tokens": event.tokens, "finished": event.finished, "reason": event.reason})
        except Exception as exc:  # a crashed scheduler must not leave clients waiting forever
            for request in [*self.running.values(), *self.waiting]:
                self._emit(request, {"error": f"{type(exc).__name__}: {exc}"})
            raise
        finally:
            while not self.incoming.empty():
                self.waiting.append(self.incoming.get_nowait())
            for request in [*self.running.values(), *self.waiting]:
                self._emit(request, {"error": "the server shut down"})

    def _admit(self, block: bool) -> None:
        try:
            while True:
                self.waiting.append(self.incoming.get(timeout=0.05) if block else self.incoming.get_nowait())
                block = False
        except queue.Empty:
            pass
        self.waiting = [r for r in self.waiting if not r.cancelled]
        while self.waiting and len(self.running) < self.max_batch:
            request = self.waiting.pop(0)
            tau = request.tau if request.tau is not None else policy_tau(self.policy, self.load)
            request.rid = self.batcher.add(request.prompt_ids, max_new_tokens=request.max_tokens, tau=tau)
            self.running[request.rid] = request


# ---------------------------------------------------------------------------------------------------------------
# the HTTP layer


def _error(status: int, message: str, param: str | None = None, code: str | None = None):
    from fastapi.responses import JSONResponse

    return JSONResponse(
        {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}, status
    )


def _field(body: dict, name: str, kind, default=None, check=None, what: str = ""):
    value = body.get(name, default)
    if value is None:
        return default
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        raise BadRequest(f"'{name}' must be {what or kind.__name__}; got {json.dumps(value)}")
    if check is not None and not check(value):
        raise BadRequest(f"'{name}' must be {what}; got {json.dumps(value)}")
    return value


def parse_request(body, engine: ServeEngine, chat: bool, max_tokens_limit: int) -> dict:
    """The settings of one completion request, or BadRequest naming the first bad field."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    tokenizer = engine.tokenizer
    if chat:
        messages = body.get("messages")
        if (
            not isinstance(messages, list)
            or not messages
            or not all(isinstance(m, dict) and isinstance(m.get("content"), str) and m.get("role") for m in messages)
        ):
            raise BadRequest('\'messages\' must be a non-empty list of {"role": ..., "content": "..."}')
        try:
            ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        except Exception as exc:  # the template's own message (e.g. a role it does not know)
            raise BadRequest(f"'messages' cannot be rendered by the model's chat template: {exc}") from None
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt:
            raise BadRequest("'prompt' must be a non-empty string (one prompt per request)")
        ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    max_tokens = _field(
        body,
        "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens",
        int,
        16,
        lambda v: 1 <= v <= max_tokens_limit,
        f"an integer in [1, {max_tokens_limit}]",
    )
    if engine.max_positions and len(ids) + max_tokens > engine.max_positions:
        raise BadRequest(
            f"the prompt ({len(ids)} tokens) plus max_tokens ({max_tokens}) exceed the model's "
            f"{engine.max_positions} positions"
        )
    tau = _field(body, "tau", (int, float), None, lambda v: 0 < v <= 1, "a number in (0, 1]")
    _field(body, "temperature", (int, float), 0, lambda v: v == 0, "0 (decoding is greedy)")
    _field(body, "n", int, 1, lambda v: v == 1, "1 (one completion per request)")
    # sampling settings are refused unless neutral: the answer must be what was asked for, or an error
    _field(body, "top_p", (int, float), 1, lambda v: v == 1, "1 (decoding is greedy)")
    _field(body, "repetition_penalty", (int, float), 1, lambda v: v == 1, "1 (no penalty)")
    _field(body, "presence_penalty", (int, float), 0, lambda v: v == 0, "0 (no penalty)")
    _field(body, "frequency_penalty", (int, float), 0, lambda v: v == 0, "0 (no penalty)")
    _field(body, "ignore_eos", bool, False, lambda v: not v, "false (a request ends at the end-of-sequence token)")
    _field(body, "logprobs", (bool, int), None, lambda v: not v, "absent (log-probabilities are not returned)")
    _field(body, "top_logprobs", int, None, lambda v: not v, "absent (log-probabilities are not returned)")
    _field(body, "top_k", int, -1, lambda v: v in (-1, 0), "-1 or 0 (decoding is greedy)")
    _field(body, "min_p", (int, float), 0, lambda v: v == 0, "0 (decoding is greedy)")
    _field(body, "min_tokens", int, 0, lambda v: v == 0, "0 (a request ends at the end-of-sequence token)")
    _field(body, "best_of", int, 1, lambda v: v == 1, "1 (one completion per request)")
    _field(body, "echo", bool, False, lambda v: not v, "false (the prompt is not returned)")
    _field(body, "logit_bias", dict, None, lambda v: not v, "absent (no logit bias)")
    _field(body, "suffix", str, None, lambda v: not v, "absent (no suffix)")
    _field(body, "response_format", dict, None, lambda v: v.get("type") == "text", 'absent or {"type": "text"}')
    stop = body.get("stop")
    stop = [stop] if isinstance(stop, str) else stop
    if stop is not None and (not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop)):
        raise BadRequest("'stop' must be a string or a list of non-empty strings")
    stream = _field(body, "stream", bool, False, what="true or false")
    options = _field(body, "stream_options", dict, {}, what='an object such as {"include_usage": true}')
    include_usage = _field(options, "include_usage", bool, False, what="true or false")
    return {
        "ids": list(ids),
        "max_tokens": max_tokens,
        "tau": tau,
        "stop": stop or [],
        "stream": stream,
        "include_usage": stream and include_usage,
    }


class Detokenizer:
    """The text of a request's tokens so far, cut at its first stop string; what is new since the last call. Text
    that may be the start of a stop string is held back until the next tokens (or the end) show it is not."""

    def __init__(self, tokenizer, stop: list[str]):
        self.tokenizer, self.stop = tokenizer, stop
        self.ids: list[int] = []
        self.sent = 0
        self.stopped = False

    def add(self, tokens: list[int], final: bool = False) -> str:
        self.ids += tokens
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        hits = [text.find(s) for s in self.stop if s in text]
        if hits:
            text, self.stopped = text[: min(hits)], True
        elif not final:
            if text.endswith("\ufffd"):  # half of a multi-byte character: wait for the rest
                return ""
            held = max((k for s in self.stop for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
            text = text[: len(text) - held]
        new, self.sent = text[self.sent :], max(self.sent, len(text))
        return new


def create_app(engine: ServeEngine, model_name: str, max_tokens_limit: int):
    """The FastAPI application over a started :class:`ServeEngine`. (This module does not postpone annotations:
    FastAPI reads the handlers' parameter types, imported here, from their annotations.)"""
    from contextlib import asynccontextmanager

    from fastapi import FastAPI
    from fastapi import Request as HTTPRequest
    from fastapi.responses import StreamingResponse

    @asynccontextmanager
    async def lifespan(app):
        yield
        engine.stop()

    app = FastAPI(title="mars serve", lifespan=lifespan)

    @app.exception_handler(BadRequest)
    async def bad_request(_, exc: BadRequest):
        return _error(400, str(exc))

    @app.exception_handler(Unavailable)
    async def unavailable(_, exc: Unavailable):
        return _error(503, str(exc))

    @app.get("/health")
    async def health():
        counters = dict(engine.counters)  # (copies: the scheduler thread may add a tau while this is serialized)
        counters["rows_by_tau"] = dict(counters["rows_by_tau"])
        return {"status": "ok", "load": engine.load, "tau": engine.last_tau, "method": engine.method, **counters}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "mars"}]}

    async def complete(http: HTTPRequest, chat: bool):
        # a body that is not declared JSON is refused, not guessed at (HTTP 415)
        content_type = http.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/json" and not content_type.endswith("+json"):
            declared = f"Content-Type {content_type}" if content_type else "no Content-Type"
            return _error(415, f"the request body must be JSON sent as Content-Type application/json, not {declared}")
        try:
            body = await http.json()
        except ValueError:
            raise BadRequest("the request body is not valid JSON") from None
        asked = body.get("model") if isinstance(body, dict) else None
        if asked is not None and asked != model_name:  # (absent: the one model served, as vLLM does)
            return _error(
                404,
                f"the model {json.dumps(asked)} does not exist: this server serves {model_name!r} (GET /v1/models)",
                param="model",
                code="model_not_found",
            )
        settings = parse_request(body, engine, chat, max_tokens_limit)
        request = Request(
            settings["ids"], settings["max_tokens"], settings["tau"], settings["stop"], asyncio.get_running_loop()
        )
        engine.submit(request)
        kind = "chat.completion" if chat else "text_completion"
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        detok = Detokenizer(engine.tokenizer, settings["stop"])
        counts = {"forwards": 0, "tokens": 0}

        def choice(text: str, finish: str | None, delta: bool) -> dict:
            if chat:
                key = "delta" if delta else "message"
                return {"index": 0, key: {"role": "assistant", "content": text}, "finish_reason": finish}
            return {"index": 0, "text": text, "finish_reason": finish}

        def mars_info() -> dict:
            f = counts["forwards"]
            return {
                "tau": request.tau if request.tau is not None else engine.last_tau,
                "forwards": f,
                "tokens_per_forward": counts["tokens"] / f if f else 0.0,
            }

        async def events():
            """(new text, finish reason or None) per forward of this request, until it finishes."""
            while True:
                event = await request.events.get()
                if "error" in event:
                    raise RuntimeError(event["error"])
                counts["forwards"] += 1
                counts["tokens"] += len(event["tokens"])
                text = detok.add(event["tokens"], final=event["finished"])
                if detok.stopped:
                    engine.cancel(request)
                    yield text, "stop"
                    return
                if event["finished"]:
                    yield text, event["reason"]
                    return
                yield text, None

        def usage() -> dict:
            return {
                "prompt_tokens": len(request.prompt_ids),
                "completion_tokens": counts["tokens"],
                "total_tokens": len(request.prompt_ids) + counts["tokens"],
            }

        if settings["stream"]:

            async def stream():
                try:
                    async for text, finish in events():
                        chunk = {
                            "id": rid,
                            "object": f"{kind}.chunk" if chat else kind,
                            "created": int(request.created),
                            "model": model_name,
                            "choices": [choice(text, finish, delta=True)],
                        }
                        if finish:
                            chunk["mars"] = mars_info()
                        yield f"data: {json.dumps(chunk)}\n\n"
                    if settings["include_usage"]:  # OpenAI's stream_options: one more chunk, no choices
                        chunk = {"id": rid, "object": chunk["object"], "created": chunk["created"], "model": model_name}
                        yield f"data: {json.dumps({**chunk, 'choices': [], 'usage': usage()})}\n\n"
                    yield STREAM_DONE
                except RuntimeError as exc:
                    yield f"data: {json.dumps({'error': {'message': str(exc), 'type': 'server_error'}})}\n\n"
                finally:  # the client went away (or the stream ended): free its row
                    engine.cancel(request)

            return StreamingResponse(stream(), media_type="text/event-stream")

        pieces, finish = [], None
        try:
            async for text, finish in events():
                pieces.append(text)
        except RuntimeError as exc:
            return _error(503, str(exc))
        finally:
            engine.cancel(request)
        return {
            "id": rid,
            "object": kind,
            "created": int(request.created),
            "model": model_name,
            "choices": [choice("".join(pieces), finish, delta=False)],
            "usage": usage(),
            "mars": mars_info(),
        }

    @app.post("/v1/completions")
    async def completions(http: HTTPRequest):
        return await complete(http, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(http: HTTPRequest):
        return await complete(http, chat=True)

    return app


def serve_settings(config_file: str | None, flags: dict) -> dict:
    """The ``serve`` section (the schema's defaults, a config's section, then the flags)."""
    from mars.pipeline.config import load_config, validate_flags

    settings = schema_defaults("serve")
    if config_file:
        settings.update(load_config(config_file)["serve"])
    flags = {k: v for k, v in flags.items() if v is not None}
    validate_flags("serve", flags)
    settings.update(flags)
    settings["load_policy"] = check_load_policy(settings["load_policy"])
    return settings


def build_engine(model_path: str, settings: dict):
    from mars.checkpoints import check_checkpoint, trained_block_size
    from mars.decoding.generation import load_model

    path = check_checkpoint(model_path, "--model")
    block = trained_block_size(path)
    if settings["method"] != "ar" and not block:
        raise ConfigError(
            f"--model {model_path}: no trained block size in the checkpoint (not a MARS checkpoint?): "
            "serve it with --method ar"
        )
    model, tokenizer = load_model(path)
    if settings["method"] != "ar" and tokenizer.mask_token_id is None:
        raise ConfigError(f"--model {model_path}: the tokenizer has no mask token")
    from mars.decoding.cpu_linear import use_cpu_linear

    use_cpu_linear(model, settings["cpu_linear"])
    engine = ServeEngine(
        model,
        tokenizer,
        method=settings["method"],
        block_size=block or 1,
        max_batch=settings["max_batch"],
        load_policy=settings["load_policy"],
    )
    return engine, path


def add_parser(commands) -> None:
    """``mars serve`` (registered by mars.cli)."""
    cmd = commands.add_parser("serve", help="an OpenAI-compatible HTTP endpoint (continuous batching, tau per request)")
    cmd.add_argument("--model", required=True, help="checkpoint folder")
    cmd.add_argument("--config", help="a config whose serve section to use (default: the schema's)")
    cmd.add_argument("--host")
    cmd.add_argument("--port", type=int)
    cmd.add_argument("--method", help="mars | mars_lossless | ar")
    cmd.add_argument("--max-batch", type=int)
    cmd.add_argument("--max-tokens", type=int, help="the largest max_tokens a request may ask for")
    cmd.add_argument("--load-policy", help="LOAD:TAU,... the tau of requests that set none, by load (0:1.0,4:0.95)")
    cmd.add_argument("--cpu-linear", help="default | onednn_packed: the linear kernel on a CPU (bench.cpu_linear)")
    cmd.set_defaults(run=_run)


def _run(args) -> None:
    import sys

    import uvicorn

    flags = {
        "host": args.host,
        "port": args.port,
        "method": args.method,
        "max_batch": args.max_batch,
        "max_tokens": args.max_tokens,
        "load_policy": parse_load_policy(args.load_policy) if args.load_policy else None,
        "cpu_linear": args.cpu_linear,
    }
    settings = serve_settings(args.config, flags)
    engine, path = build_engine(args.model, settings)
    engine.start()
    app = create_app(engine, path.name, settings["max_tokens"])
    print(
        f"mars serve: {path.name} ({settings['method']}, max batch {settings['max_batch']}) on "
        f"http://{settings['host']}:{settings['port']}/v1",
        file=sys.stderr,
    )
    uvicorn.run(app, host=settings["host"], port=settings["port"], log_level="warning")
