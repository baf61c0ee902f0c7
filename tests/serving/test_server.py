"""``mars serve`` over real HTTP on loopback: completions equal the decoder's own output for the same request alone,
streaming equals the whole answer, the load policy sets the tau of requests that set none, bad requests are one
HTTP 400 message, a client that disconnects frees its row, and shutdown ends open requests and refuses new ones."""

import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from mars.decoding.engine import generate
from mars.decoding.generation import encode_prompts, load_model
from mars.pipeline.config import ConfigError
from mars.serving import server as S

# prompts written for this test only
PROMPTS = ["What is 12 plus 7?", "Name a colour."]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Running:
    """A ``mars serve`` app on a loopback port, in a thread."""

    def __init__(self, model_dir, **settings):
        import uvicorn

        settings = S.serve_settings(None, settings)
        self.engine, path = S.build_engine(str(model_dir), settings)
        self.engine.start()
        app = S.create_app(self.engine, path.name, settings["max_tokens"])
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.02)

    def post(self, path: str, body, raw: bool = False):
        data = body if raw else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method="POST")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                text = resp.read().decode()
                streamed = isinstance(body, dict) and body.get("stream")
                return resp.status, text if streamed else json.loads(text)
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read().decode())

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=60) as resp:
            return json.loads(resp.read().decode())

    def close(self):
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture(scope="module")
def served(trained_tiny):
    running = Running(trained_tiny["mars"], load_policy=[{"min_load": 0, "tau": 0.5}])
    yield running, trained_tiny
    running.close()
    assert not running.engine.thread.is_alive()  # the lifespan's shutdown stopped the scheduler


def alone(model_dir, prompts_ids, tau, budget):
    model, tokenizer = load_model(model_dir)
    kw = dict(
        eos_token_ids=[tokenizer.eos_token_id],
        pad_token_id=tokenizer.pad_token_id,
        mask_token_id=tokenizer.mask_token_id,
    )
    (g,) = generate(model, [prompts_ids], method="mars", tau=tau, block_size=4, max_new_tokens=budget, **kw)
    return g, tokenizer


def test_chat_completion_equals_the_decoder_alone_at_the_request_tau_and_the_policy_tau(served):
    running, fx = served
    _, tokenizer = load_model(fx["mars"])
    ids = encode_prompts(tokenizer, PROMPTS[:1])[0]  # (the chat template, as the endpoint applies it)
    for tau, body_tau in ((0.9, {"tau": 0.9}), (0.5, {})):  # no tau: the load policy's (0.5 at any load)
        before = running.get("/health")
        status, out = running.post(
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": PROMPTS[0]}], "max_tokens": 30, **body_tau},
        )
        assert status == 200, out
        g, _ = alone(fx["mars"], ids, tau, 30)
        assert out["choices"][0]["message"]["content"] == tokenizer.decode(g.token_ids, skip_special_tokens=True)
        assert out["usage"] == {
            "prompt_tokens": len(ids),
            "completion_tokens": len(g.token_ids),
            "total_tokens": len(ids) + len(g.token_ids),
        }
        assert out["mars"]["tau"] == tau and out["mars"]["forwards"] == g.forwards
        after = running.get("/health")  # the server's counters: this request's forwards and tokens, time inside them
        assert after["forwards"] - before["forwards"] == g.forwards
        assert after["tokens"] - before["tokens"] == len(g.token_ids)
        assert after["forward_seconds"] > before["forward_seconds"]
        rows = {t: n - before["rows_by_tau"].get(t, 0) for t, n in after["rows_by_tau"].items()}
        assert {t: n for t, n in rows.items() if n} == {str(tau): g.forwards}  # its forwards, all at its tau
        finish = "stop" if g.token_ids[-1] == tokenizer.eos_token_id else "length"
        assert out["choices"][0]["finish_reason"] == finish


def test_streaming_and_concurrent_requests(served):
    running, fx = served
    results = {}

    def ask(i, stream):
        body = {"prompt": PROMPTS[i], "max_tokens": 24, "tau": 0.7, "stream": stream}
        if stream:  # as `vllm bench serve` asks: neutral settings, and the usage chunk
            body.update(stream_options={"include_usage": True}, repetition_penalty=1.0, logprobs=None)
        results[(i, stream)] = running.post("/v1/completions", body)

    threads = [threading.Thread(target=ask, args=(i, s)) for i in range(2) for s in (False, True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    _, tokenizer = load_model(fx["mars"])
    for i in range(2):
        status, whole = results[(i, False)]
        assert status == 200
        ids = tokenizer(PROMPTS[i])["input_ids"]
        g, _ = alone(fx["mars"], ids, 0.7, 24)
        assert whole["choices"][0]["text"] == tokenizer.decode(g.token_ids, skip_special_tokens=True)
        status, text = results[(i, True)]
        events = [line[6:] for line in text.split("\n") if line.startswith("data: ")]
        assert status == 200 and events[-1] == "[DONE]"
        *chunks, usage = [json.loads(e) for e in events[:-1]]
        assert "".join(c["choices"][0]["text"] for c in chunks) == whole["choices"][0]["text"]
        assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
        assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
        assert chunks[-1]["mars"] == whole["mars"]
        assert usage["choices"] == [] and usage["usage"] == whole["usage"]  # OpenAI's include_usage chunk


def test_a_client_that_disconnects_mid_stream_frees_its_row(served):
    import http.client

    running, fx = served
    engine = running.engine
    body = {"prompt": PROMPTS[1], "max_tokens": 200, "tau": 1.0, "stream": True}
    _, tokenizer = load_model(fx["mars"])
    g, _ = alone(fx["mars"], tokenizer(PROMPTS[1])["input_ids"], 1.0, 200)
    assert g.forwards >= 8, g.forwards  # alone, the answer takes this many forwards
    steps = []
    step = engine.batcher.step

    def slow_step():  # (instrumented: each forward takes 50 ms more, so a disconnect is seen mid-answer)
        time.sleep(0.05)
        steps.append(len(engine.running))
        return step()

    engine.batcher.step = slow_step
    try:
        conn = http.client.HTTPConnection("127.0.0.1", running.port, timeout=60)
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200
        while not resp.readline().startswith(b"data: "):  # the first chunk: the request is decoding
            pass
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        deadline = time.time() + 30
        while (engine.running or engine.load) and time.time() < deadline:
            time.sleep(0.01)
        assert not engine.running and engine.load == 0  # its row left the batch
        assert len(steps) < g.forwards - 2, (len(steps), g.forwards)  # before its answer was complete
    finally:
        engine.batcher.step = step


def test_a_stop_string_ends_the_answer_there(served):
    running, _ = served
    body = {"messages": [{"role": "user", "content": PROMPTS[0]}], "max_tokens": 24, "tau": 1.0}
    status, whole = running.post("/v1/chat/completions", body)
    text = whole["choices"][0]["message"]["content"]
    assert status == 200 and len(text) > 4, text
    stop = text[2:4]
    status, cut = running.post("/v1/chat/completions", {**body, "stop": stop})
    assert status == 200 and cut["choices"][0]["message"]["content"] == text[: text.index(stop)]
    assert cut["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize(
    "body, message",
    [
        ({"max_tokens": 4}, "'prompt' must be a non-empty string"),
        ({"prompt": "hi", "max_tokens": 0}, "'max_tokens' must be an integer in [1, 1024]; got 0"),
        ({"prompt": "hi", "tau": 1.5}, "'tau' must be a number in (0, 1]; got 1.5"),
        ({"prompt": "hi", "tau": True}, "'tau' must be a number in (0, 1]; got true"),
        ({"prompt": "hi", "temperature": 0.7}, "'temperature' must be 0 (decoding is greedy); got 0.7"),
        ({"prompt": "hi", "n": 2}, "'n' must be 1 (one completion per request); got 2"),
        ({"prompt": "hi", "stop": [""]}, "'stop' must be a string or a list of non-empty strings"),
        ({"prompt": "hi", "top_p": 0.9}, "'top_p' must be 1 (decoding is greedy); got 0.9"),
        ({"prompt": "hi", "repetition_penalty": 1.2}, "'repetition_penalty' must be 1 (no penalty); got 1.2"),
        ({"prompt": "hi", "ignore_eos": True}, "'ignore_eos' must be false"),
        ({"prompt": "hi", "logprobs": 5}, "'logprobs' must be absent"),
        ({"prompt": "hi", "top_k": 40}, "'top_k' must be -1 or 0 (decoding is greedy); got 40"),
        ({"prompt": "hi", "min_p": 0.1}, "'min_p' must be 0 (decoding is greedy); got 0.1"),
        ({"prompt": "hi", "echo": True}, "'echo' must be false"),
        ({"prompt": "hi", "response_format": {"type": "json_object"}}, "'response_format' must be absent or"),
        ({"prompt": "hi", "stream": True, "stream_options": {"include_usage": 1}}, "'include_usage' must be true"),
        ({"prompt": "hi " * 600, "max_tokens": 500}, "exceed the model's 1024 positions"),
        (b"{not json", "the request body is not valid JSON"),
        ([1, 2], "the request body must be a JSON object"),
    ],
)
def test_bad_requests_are_one_http_400_message(served, body, message):
    running, _ = served
    status, out = running.post("/v1/completions", body, raw=isinstance(body, bytes))
    assert status == 400
    assert message in out["error"]["message"] and "\n" not in out["error"]["message"]


def test_a_request_for_another_model_is_openais_404_model_not_found(served):
    running, fx = served
    served_id = running.get("/v1/models")["data"][0]["id"]
    assert served_id == fx["mars"].name
    status, out = running.post("/v1/completions", {"model": "gpt-4o", "prompt": "hi", "max_tokens": 2})
    assert status == 404
    assert out["error"]["code"] == "model_not_found" and out["error"]["param"] == "model"
    assert out["error"]["type"] == "invalid_request_error"
    assert (
        out["error"]["message"]
        == f'the model "gpt-4o" does not exist: this server serves {served_id!r} (GET /v1/models)'
    )
    status, out = running.post(
        "/v1/chat/completions", {"model": "Qwen/Qwen2.5-0.5B-Instruct", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert status == 404 and out["error"]["code"] == "model_not_found"
    # the served model by its id, or no model named: answered
    for body in ({"model": served_id, "prompt": "hi", "max_tokens": 2}, {"prompt": "hi", "max_tokens": 2}):
        status, out = running.post("/v1/completions", body)
        assert status == 200 and out["model"] == served_id, out


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_a_body_not_declared_json_is_http_415(served, content_type):
    """JSON sent as another Content-Type (or none) is refused, not guessed at; application/json with a charset, and
    a +json type, are JSON."""
    running, _ = served
    data = json.dumps({"prompt": "hi", "max_tokens": 2}).encode()

    def post(kind):
        req = urllib.request.Request(f"http://127.0.0.1:{running.port}/v1/completions", data=data, method="POST")
        if kind is not None:
            req.add_header("Content-Type", kind)
        else:  # (urllib would add its form type itself)
            req.unredirected_hdrs["Content-type"] = ""
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, json.loads(resp.read().decode())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read().decode())

    status, out = post(content_type)
    assert status == 415, out
    declared = f"Content-Type {content_type}" if content_type else "no Content-Type"
    assert out["error"]["message"] == (
        f"the request body must be JSON sent as Content-Type application/json, not {declared}"
    )
    for kind in ("application/json; charset=utf-8", "application/vnd.api+json"):
        assert post(kind)[0] == 200


def test_malformed_chat_messages_are_one_http_400_message(served):
    running, _ = served
    status, out = running.post("/v1/chat/completions", {"messages": [{"role": "user"}]})
    assert status == 400 and out["error"]["message"].startswith("'messages' must be a non-empty list")


def test_the_load_policy_by_hand_and_its_checks():
    policy = S.check_load_policy(S.parse_load_policy("8:0.9,0:1.0,4:0.95"))
    assert [S.policy_tau(policy, n) for n in (0, 3, 4, 7, 8, 100)] == [1.0, 1.0, 0.95, 0.95, 0.9, 0.9]
    for text, message in (
        ("1:1.0", "first entry must have min_load 0"),
        ("0:1.0,4:1.5", "every tau of the load policy must be in (0, 1]"),
        ("0:1.0,0:0.9", "names a min_load twice"),
        ("0-1.0", "--load-policy wants LOAD:TAU"),
    ):
        with pytest.raises(ConfigError, match=re.escape(message)):
            S.check_load_policy(S.parse_load_policy(text))


def test_a_cancelled_request_frees_its_row_and_shutdown_ends_open_requests(trained_tiny):
    import asyncio

    settings = S.serve_settings(None, {"max_batch": 1})
    engine, _ = S.build_engine(str(trained_tiny["mars"]), settings)
    engine.start()
    loop = asyncio.new_event_loop()
    long = S.Request([5, 6, 7], 10_000 // 20, None, [], loop)
    queued = S.Request([5, 6, 8], 4, None, [], loop)
    engine.submit(long)
    engine.submit(queued)  # max batch 1: it waits until the first leaves
    deadline = time.time() + 60
    while long.rid is None and time.time() < deadline:
        time.sleep(0.01)
    assert engine.running and queued.rid is None
    engine.cancel(long)
    while queued.rid is None and time.time() < deadline:
        time.sleep(0.01)
    assert queued.rid is not None and long.rid not in engine.running  # the cancelled row left, the next joined
    engine.stop()
    assert not engine.thread.is_alive()
    with pytest.raises(S.Unavailable, match="shutting down"):  # answered as HTTP 503
        engine.submit(S.Request([1], 4, None, [], loop))
    loop.close()


def test_serve_refuses_a_checkpoint_without_a_block_size_for_mars(trained_tiny):
    with pytest.raises(ConfigError, match="no trained block size"):
        S.build_engine(str(trained_tiny["ar"]), S.serve_settings(None, {}))
    with pytest.raises(ConfigError, match="--max-batch: 0 is less than the minimum of 1"):
        S.serve_settings(None, {"max_batch": 0})


def test_cpu_linear_serves_the_packed_model_with_the_same_answers(trained_tiny):
    from mars.decoding.cpu_linear import PackedLinear

    _, tokenizer = load_model(trained_tiny["mars"])
    ids = encode_prompts(tokenizer, PROMPTS[1:])[0]
    for kernel in ("default", "onednn_packed"):
        engine, _ = S.build_engine(str(trained_tiny["mars"]), S.serve_settings(None, {"cpu_linear": kernel}))
        packed = any(isinstance(m, PackedLinear) for m in engine.batcher.model.modules())
        on_cpu = next(engine.batcher.model.parameters()).device.type == "cpu"
        assert packed == (kernel == "onednn_packed" and on_cpu)  # (the setting is for CPUs; ignored on CUDA)
        # one request through the batcher: the tokens of the unpacked decoder alone (the kernels differ by ~1e-6)
        engine.batcher.add(ids, max_new_tokens=24, tau=0.9)
        tokens, finished = [], False
        while not finished:
            (event,) = engine.batcher.step()
            tokens, finished = tokens + event.tokens, event.finished
        assert tokens == alone(trained_tiny["mars"], ids, 0.9, 24)[0].token_ids, kernel


def test_mars_serve_bad_flags_are_one_line(tmp_path):
    import subprocess
    import sys

    for args, line in (
        (["--model", str(tmp_path / "nope")], f"error: --model {tmp_path / 'nope'}: no such checkpoint folder"),
        (["--model", str(tmp_path), "--port", "0"], "error: --port: 0 is less than the minimum of 1"),
        (
            ["--model", str(tmp_path), "--cpu-linear", "mkl"],
            "error: --cpu-linear: 'mkl' is not one of ['default', 'onednn_packed']",
        ),
        (
            ["--model", str(tmp_path), "--load-policy", "2:1.0"],
            "error: the load policy's first entry must have min_load 0 (the tau of an idle server)",
        ),
    ):
        done = subprocess.run([sys.executable, "-m", "mars.cli", "serve", *args], capture_output=True, text=True)
        assert done.returncode == 2 and done.stderr.strip().splitlines() == [line], done.stderr
