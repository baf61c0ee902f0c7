"""The ``mars`` lm-eval model: lm-eval's ``HFLM`` with ``generate_until`` going through
``mars.decoding.engine.generate``.

Everything except generation is the harness's own (``HFLM``): tokenization, chat templating, loglikelihood and
loglikelihood_rolling (plain causal forwards).  ``generate_until`` mirrors ``HFLM.generate_until`` step by step so
that, at tau = 1.0, the outputs are identical to the ``hf`` model's:

* requests are grouped by generation kwargs and sorted by descending context length (the harness's ``Collator``),
  then cut into batches of ``batch_size``;
* contexts are encoded by ``HFLM.tok_batch_encode`` with the same left truncation to ``max_length - max_gen_toks``
  tokens; the left padding is then stripped again, because ``decoding.generate`` takes ragged token lists;
* ``until`` gets the EOS text appended (``handle_stop_sequences``); generation stops at an EOS id (those of the
  model's generation config and the tokenizer's), at a token-level stop sequence (the encoding of a stop string
  that contains no special token: an early exit only, since a stop string spanning token boundaries is not seen at
  token level) or at ``max_gen_toks``; the text is decoded with ``skip_special_tokens=True`` and truncated at the
  first stop string (``postprocess_generated_text``), exactly as HFLM post-truncates the output of ``generate``.

Greedy only: ``do_sample=True``, ``temperature > 0`` or ``num_beams > 1`` raise ``ValueError``.  Fields of the
checkpoint's ``generation_config`` that transformers applies even to greedy search (``repetition_penalty`` (1.05 in
Qwen2.5-Instruct's), ``no_repeat_ngram_size`` ...) are NOT applied by ``mars.decoding.engine``: they are logged as a
warning and listed in ``model_args()["ignored_generation_config"]``; reset them in the checkpoint to compare with
``hf``.

Model args (``--model_args`` / constructor): ``tau`` (1.0), ``block_size`` (the checkpoint's trained one), ``cache``,
``cache_block_size`` and ``metric`` (the config schema's ``eval`` defaults), ``method`` ("mars"; "ar" / "jacobi" /
"block_diffusion"), plus every HFLM argument (``pretrained``, ``batch_size``, ``device``, ``max_length`` ...).
``device`` defaults to CUDA when available; ``dtype`` "auto" (the default; config ``eval.dtype``) is bf16 on CUDA and
fp32 on the CPU (:func:`mars.decoding.generation.resolve_dtype`; HFLM's own "auto" would take the checkpoint's). The
mask token id is the tokenizer's ``mask_token_id`` (``mask_token_id=`` overrides it; ``mask_token=`` names a token of
the vocabulary to use when the tokenizer has none, e.g. a hub checkpoint); "mars" and "block_diffusion" need one.

Decoding statistics accumulate in ``self.decode_stats`` (``reset_stats()`` clears them): one record per request
(task, doc id, prompt tokens, generated token ids and count, forwards, tokens per forward, how many tokens each
forward produced ("chunks"), share of the batch's wall time, whether the prompt was truncated), and totals.
``stats_by_task()`` sums them per task: tokens per forward of a task = its generated tokens / its forwards (a
request's ``forwards`` counts the batched forwards it took part in, prefill = 1; generated tokens include the EOS
and any tokens after a stop string, i.e. what the decoder produced).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import Any

import torch
from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM
from lm_eval.models.utils import Collator, handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text
from tqdm import tqdm

from mars.decoding import engine as decoding
from mars.decoding.settings import decoding_settings

log = logging.getLogger(__name__)

NEEDS_MASK = ("mars", "mars_lossless", "block_diffusion")
MARS_ARGS = ("tau", "block_size", "cache", "cache_block_size", "metric", "method")


@register_model("mars")
class MARSLM(HFLM):
    """lm-eval model ``mars`` (see the module docstring)."""

    def __init__(
        self,
        pretrained,
        tau: float = 1.0,
        block_size: int | None = None,
        cache: str | None = None,
        cache_block_size: int | None = None,
        metric: str | None = None,
        method: str = "mars",
        mask_token_id: int | None = None,
        mask_token: str | None = None,
        device: str | None = None,
        dtype: str | torch.dtype | None = "auto",
        **kwargs,
    ) -> None:
        from mars.decoding.generation import check_window, default_window, resolve_device, resolve_dtype
        from mars.pipeline.config import schema_defaults

        defaults = schema_defaults("eval")  # the config schema's decoding defaults, the one place they live
        if block_size is None:  # the window the checkpoint was trained with
            block_size = default_window(pretrained, method)
            if block_size is None and method in NEEDS_MASK and float(tau) < 1.0:  # (tau 1 appends no mask)
                raise ValueError(f"{pretrained} records no trained block size; pass block_size=")
        self.decoding_args = decoding_settings(
            tau=tau,
            block_size=1 if block_size is None else block_size,
            cache=defaults["cache"] if cache is None else cache,
            cache_block_size=defaults["cache_block_size"] if cache_block_size is None else cache_block_size,
            metric=defaults["metric"] if metric is None else metric,
            method=method,
        )
        check_window(**{k: self.decoding_args[k] for k in ("method", "block_size", "tau")})  # (before any load)
        device = str(resolve_device(device))
        super().__init__(pretrained=pretrained, device=device, dtype=resolve_dtype(dtype, device), **kwargs)
        if mask_token_id is None:
            mask_token_id = getattr(self.tokenizer, "mask_token_id", None)
        if mask_token_id is None and mask_token:  # a hub checkpoint: the world's reserved token serves as [MASK]
            mask_token_id = self.tokenizer.convert_tokens_to_ids(mask_token)
            if mask_token_id is None or mask_token_id == self.tokenizer.unk_token_id:
                raise ValueError(f"mask token {mask_token!r} is not in the vocabulary of {pretrained}")
        self.mask_token_id = None if mask_token_id is None else int(mask_token_id)
        if self.decoding_args["method"] in NEEDS_MASK and self.mask_token_id is None:
            raise ValueError(
                f"method {self.decoding_args['method']!r} needs a mask token, but the tokenizer of "
                f"{pretrained} has none (pass mask_token_id=...)"
            )
        self.ignored_generation_config = self._generation_config_extras()
        if self.ignored_generation_config:
            log.warning(
                "%s: its generation_config sets %s, which transformers' generate (the 'hf' model) applies "
                "even to greedy decoding; mars.decoding.engine decodes plain greedy, so outputs can differ from "
                "'hf' (reset these fields in both to compare)",
                pretrained,
                self.ignored_generation_config,
            )
        self.reset_stats()

    def _generation_config_extras(self) -> dict[str, Any]:
        """Fields of the model's generation_config that change greedy decoding in transformers' generate."""
        from transformers import GenerationConfig

        config = getattr(self.model, "generation_config", None)
        if config is None:
            return {}
        default = GenerationConfig()
        fields = (
            "repetition_penalty",
            "encoder_repetition_penalty",
            "no_repeat_ngram_size",
            "bad_words_ids",
            "suppress_tokens",
            "begin_suppress_tokens",
            "forced_bos_token_id",
            "forced_eos_token_id",
            "min_length",
            "min_new_tokens",
            "sequence_bias",
            "exponential_decay_length_penalty",
        )
        return {
            f: getattr(config, f)
            for f in fields
            if getattr(config, f, None) is not None and getattr(config, f, None) != getattr(default, f, None)
        }

    # ------------------------------------------------------------------------------------------------ stats

    def reset_stats(self) -> None:
        self.decode_stats: dict[str, Any] = {
            "requests": [],
            "generated_tokens": 0,
            "forwards": 0,
            "model_calls": 0,
            "wall_time_s": 0.0,
            "batches": 0,
        }

    @property
    def tokens_per_forward(self) -> float:
        s = self.decode_stats
        return s["generated_tokens"] / s["forwards"] if s["forwards"] else 0.0

    def stats_by_task(self) -> dict[str, dict[str, Any]]:
        """{task: generated_tokens, forwards, tokens_per_forward, requests, wall_time_s, truncated_prompts}."""
        out: dict[str, dict[str, Any]] = defaultdict(
            lambda: {"generated_tokens": 0, "forwards": 0, "requests": 0, "wall_time_s": 0.0, "truncated_prompts": 0}
        )
        for r in self.decode_stats["requests"]:
            t = out[r["task"]]
            t["generated_tokens"] += r["generated_tokens"]
            t["forwards"] += r["forwards"]
            t["requests"] += 1
            t["wall_time_s"] += r["wall_time_s"]
            t["truncated_prompts"] += int(r["truncated"])
        for t in out.values():
            t["tokens_per_forward"] = t["generated_tokens"] / t["forwards"] if t["forwards"] else 0.0
        return dict(out)

    def model_args(self) -> dict[str, Any]:
        """The exact arguments generation runs with (for result files)."""
        return {
            **self.decoding_args,
            "mask_token_id": self.mask_token_id,
            "pretrained": str(self.pretrained),
            "batch_size": self.batch_size,
            "device": str(self.device),
            "dtype": str(self.model.dtype),
            "max_length": self.max_length,
            "eos_token_ids": self._eos_ids(),
            "pad_token_id": self._pad_id(),
            "ignored_generation_config": dict(self.ignored_generation_config),
        }

    def get_model_info(self) -> dict:
        """Like HFLM's, without the hub look-up (offline), plus the decoding arguments."""
        return {
            "model_num_parameters": sum(p.numel() for p in self._model.parameters()),
            "model_dtype": str(self._model.dtype),
            "model_revision": self.revision,
            "model_sha": "",
            "mars_decoding": dict(self.decoding_args),
            "mask_token_id": self.mask_token_id,
        }

    # ------------------------------------------------------------------------------------------------ generation

    def _eos_ids(self) -> list[int]:
        ids: list[int] = []
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        for value in (gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos]) + [self.tokenizer.eos_token_id]:
            if value is not None and int(value) not in ids:
                ids.append(int(value))
        return ids

    def _pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.tokenizer.eos_token_id)

    def _token_stops(self, until: list[str]) -> list[list[int]]:
        special = set(self.tokenizer.all_special_ids)
        stops = []
        for s in until:
            if not s:
                continue
            ids = self.tokenizer.encode(s, add_special_tokens=False)
            if ids and not special.intersection(ids) and self.tokenizer.decode(ids) == s:
                stops.append(ids)
        return stops

    @staticmethod
    def _check_greedy(kwargs: dict) -> None:
        if kwargs.get("do_sample"):
            raise ValueError("the mars model decodes greedily only: do_sample=True is not supported")
        if float(kwargs.get("temperature", 0.0) or 0.0) > 0.0:
            raise ValueError(f"the mars model decodes greedily only: temperature={kwargs['temperature']} > 0")
        if int(kwargs.get("num_beams", 1) or 1) > 1:
            raise ValueError("the mars model decodes greedily only: num_beams > 1 is not supported")

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        res: list[str] = []

        def _collate(req):
            toks = self.tok_encode(req[0])
            return -len(toks), req[0]

        pbar = tqdm(
            total=len(requests),
            disable=(disable_tqdm or (self.rank != 0)),
            desc=f"Running generate_until requests [{self.decoding_args['method']} tau={self.decoding_args['tau']}]",
        )
        batch_size = self.batch_size if self.batch_size != "auto" else 1  # no OOM probing for generation
        # (context, gen_kwargs, request index): the index ties every output to its Instance for the stats
        re_ords = Collator(
            [(*req.args[:2], i) for i, req in enumerate(requests)],
            sort_fn=_collate,
            group_by="gen_kwargs",
            group_fn=lambda x: x[1],
        )
        eos = self.tok_decode(self.eot_token_id, skip_special_tokens=False)
        eos_ids, pad_id = self._eos_ids(), self._pad_id()
        for chunk in re_ords.get_batched(n=int(batch_size), batch_fn=None):
            contexts, all_gen_kwargs, indices = zip(*chunk, strict=True)
            gen_kwargs = all_gen_kwargs[0]
            if not isinstance(gen_kwargs, dict):
                raise ValueError(f"Expected `kwargs` to be of type `dict` but got {type(gen_kwargs)}")
            kwargs = normalize_gen_kwargs(gen_kwargs, self.max_gen_toks)
            self._check_greedy(kwargs)
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos)
            max_gen_toks = int(kwargs.pop("max_gen_toks"))
            if "max_length" in kwargs:
                raise ValueError("`max_length` in generation kwargs is not supported; use `max_gen_toks`")
            max_ctx_len = self.max_length - max_gen_toks
            if max_ctx_len <= 0:
                raise ValueError(
                    f"Invalid configuration: requested max tokens to generate ({max_gen_toks}) must be "
                    f"less than model's maximum sequence length ({self.max_length})."
                )

            # HFLM: tok_batch_encode(left padding) cut to the last max_ctx_len columns == each row's last
            # max_ctx_len real tokens; the pads are dropped (ragged rows)
            context_enc, attn_masks = self.tok_batch_encode(list(contexts), truncation=self.truncation)
            full = [row[mask.bool()].tolist() for row, mask in zip(context_enc, attn_masks)]
            full_lens = [len(f) for f in full]
            prompts = [f[-max_ctx_len:] for f in full]
            if any(n > max_ctx_len for n in full_lens):
                log.warning(
                    "left-truncated %d of %d prompts to %d tokens (max_length %d - max_gen_toks %d), as HFLM does",
                    sum(n > max_ctx_len for n in full_lens),
                    len(full),
                    max_ctx_len,
                    self.max_length,
                    max_gen_toks,
                )

            call_stats: dict = {}
            start = time.perf_counter()
            gens = decoding.generate(
                self.model,
                prompts,
                **self.decoding_args,
                max_new_tokens=max_gen_toks,
                eos_token_ids=eos_ids,
                pad_token_id=pad_id,
                mask_token_id=self.mask_token_id,
                stop_sequences=self._token_stops(until),
                stats=call_stats,
            )
            wall = time.perf_counter() - start

            s = self.decode_stats
            s["batches"] += 1
            s["model_calls"] += int(call_stats.get("model_calls", 0))
            s["wall_time_s"] += wall
            for gen, context, index, prompt, full_len in zip(gens, contexts, indices, prompts, full_lens, strict=True):
                cont_toks = list(gen.token_ids)
                if isinstance(self.think_end_token, int):
                    marks = [i for i, t in enumerate(cont_toks) if t == self.think_end_token]
                    if marks:
                        cont_toks = cont_toks[marks[-1] + 1 :]
                text = self.tok_decode(cont_toks)
                if isinstance(self.think_end_token, int):
                    text = text.lstrip()
                text = postprocess_generated_text(
                    generation=text,
                    stop=until,
                    think_end_token=self.think_end_token if isinstance(self.think_end_token, str) else None,
                )
                res.append(text)

                req = requests[index]
                s["generated_tokens"] += len(gen.token_ids)
                s["forwards"] += gen.forwards
                s["requests"].append(
                    {
                        "task": getattr(req, "task_name", None),
                        "doc_id": getattr(req, "doc_id", None),
                        "prompt_tokens": len(prompt),
                        "truncated": len(prompt) < full_len,
                        "generated_tokens": len(gen.token_ids),
                        "forwards": gen.forwards,
                        "tokens_per_forward": gen.tokens_per_forward,
                        "chunks": list(gen.chunks),
                        "token_ids": list(gen.token_ids),
                        "wall_time_s": wall / len(gens),
                    }
                )
                self.cache_hook.add_partial("generate_until", (context, gen_kwargs), text)
                pbar.update(1)
        res = re_ords.get_original(res)
        pbar.close()
        return res
