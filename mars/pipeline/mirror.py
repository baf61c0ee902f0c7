"""``mars mirror``: local stand-ins for the paper-scale inputs, so the paper configs run offline end to end.

    <out>/models/Qwen2.5-0.5B-Instruct/     a small random Qwen2ForCausalLM + a Qwen2.5-shaped tokenizer
    <out>/models/Qwen2.5-7B-Instruct/       the same at another (still small) shape, with untied embeddings; the
                                            7B mirror writes the 0.5B stand-in too: the start of Table 6's draft
    <out>/datasets/Dolci-Instruct-SFT/      SFT conversations in allenai/Dolci-Instruct-SFT's schema (parquet)
    <out>/harness/                          the six paper tasks' data sets in their hub schemas and a stand-in
                                            punkt_tab (mars.evaluation.tasks.mirror; the overlay's eval.harness_data)
    <out>/paper-<shape>-mirror.yaml         a config overlay: ``--configfile configs/paper-<shape>.yaml <overlay>``
    <out>/mirror.json                       what was written

A user with an offline cluster points ``world.base_model``, ``world.dataset`` and ``eval.harness_data`` at folders in
exactly this way;
the stand-ins are loaded by the same calls as the hub ids (``AutoModelForCausalLM.from_pretrained(folder)``,
``AutoTokenizer.from_pretrained(folder)``, ``datasets.load_dataset(folder, split="train")``), no custom code.

What is copied from the real checkpoints (Qwen2.5-{0.5B,7B}-Instruct, as published on the hub):
- the special and added tokens, in Qwen's order after the BPE vocabulary: ``<|endoftext|>`` (pad; bos_token_id of
  the config), ``<|im_start|>``, ``<|im_end|>`` (EOS of the Instruct models), the vision/box tokens, then the
  NON-special added tokens ``<tool_call>``, ``</tool_call>``, ``<|fim_prefix|>`` ... ``<|fim_pad|>`` ...
  (``<|fim_pad|>`` is what the paper configs name as ``world.mask_token``); no ``mask_token``, ``bos_token`` or
  ``unk_token`` set on the tokenizer; padding side right (the tokenizer's default);
- the model's embedding matrix has more rows than the tokenizer has tokens (151936 vs 151665 for 0.5B);
- 0.5B ties its input and output embeddings, 7B does not; rope_theta 1e6, rms_norm_eps 1e-6, bf16 weights;
- the generation config samples (do_sample, temperature 0.7, top_p 0.8, top_k 20, a repetition penalty) and stops
  at ``<|im_end|>`` or ``<|endoftext|>``: greedy decoding must be asked for explicitly, as with the real model;
- the ChatML chat template with Qwen2.5's default system prompt when the conversation has none (the tool-calling
  branches of the real template are left out: no paper task uses tools).
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

from mars.fileio import write_json_atomic, write_text_atomic
from mars.pipeline.config import ConfigError

DEFAULT_SYSTEM_PROMPT = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

# Qwen2.5's added tokens, in its id order (151643 ...): the special ones, then the plain added ones.
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
ADDED_TOKENS = [
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
]
PAD, EOS = "<|endoftext|>", "<|im_end|>"

# ChatML as Qwen2.5-Instruct renders a conversation without tools: a first system message is used as the system
# turn, else Qwen's default system prompt; every other message (a later system message included) is one turn.
CHAT_TEMPLATE = (
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\n" + DEFAULT_SYSTEM_PROMPT + "<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if not (loop.first and message['role'] == 'system') %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)


@dataclass(frozen=True)
class Shape:
    """One stand-in checkpoint: the hub model it replaces and its (small) architecture."""

    repo_id: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    tie_word_embeddings: bool
    extra_rows: int  # embedding rows beyond the tokenizer (the real ones: 271 for 0.5B, 399 for 7B)
    repetition_penalty: float  # of the real generation_config.json

    @property
    def folder(self) -> str:
        return self.repo_id.split("/")[-1]


SHAPES = {
    "0.5b": Shape("Qwen/Qwen2.5-0.5B-Instruct", 64, 192, 2, 4, 2, True, 64, 1.1),
    "7b": Shape("Qwen/Qwen2.5-7B-Instruct", 96, 256, 3, 6, 2, False, 96, 1.05),
}
DATASET_REPO = "allenai/Dolci-Instruct-SFT"
BPE_VOCAB = 1024  # the byte-level BPE's own vocabulary; the added tokens come after it

# ----------------------------------------------------------------------------------------------------------------
# the SFT data set
#
# Schema assumed for allenai/Dolci-Instruct-SFT (the Tulu-3 SFT layout that AI2's SFT mixtures use): one row per
# conversation, ``id`` (string), ``messages`` (list of {role, content}, roles system / user / assistant, ending
# with an assistant turn), ``source`` (string: the sub-data set the row comes from).

NAMES = ["Mia", "Leo", "Ava", "Noah", "Zoe", "Omar", "Lena", "Ravi", "Ines", "Tom"]
THINGS = ["apples", "marbles", "stickers", "books", "coins", "pencils", "shells", "cards"]
WORDS = ["river", "cloud", "maple", "stone", "ember", "harbor", "lantern", "meadow", "quartz", "willow", "falcon"]
SYSTEMS = [
    "You are a patient math tutor. Explain each step.",
    "You are a concise assistant. Answer briefly.",
    "You are a helpful assistant that follows instructions exactly.",
]


def _word_problem(rng: random.Random) -> tuple[str, str, int, str, str]:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a, b, c = rng.randint(5, 60), rng.randint(2, 40), rng.randint(1, 20)
    total = a + b - c
    question = f"{name} has {a} {thing} and gets {b} more. Then {name} gives away {c}. How many {thing} are left?"
    answer = (
        f"{name} starts with {a} {thing}.\nAfter getting {b} more: {a} + {b} = {a + b}.\n"
        f"After giving away {c}: {a + b} - {c} = {total}.\n#### {total}"
    )
    return question, answer, total, name, thing


def _instruction(rng: random.Random) -> tuple[str, str]:
    words = rng.sample(WORDS, rng.randint(4, 7))
    kind = rng.randrange(4)
    if kind == 0:
        return f"Sort these words alphabetically: {', '.join(words)}.", ", ".join(sorted(words))
    if kind == 1:
        sentence = " ".join(words)
        return f"Rewrite in upper case: {sentence}", sentence.upper()
    if kind == 2:
        k, n = rng.randint(2, 9), rng.randint(4, 8)
        return f"List the first {n} multiples of {k}.", ", ".join(str(k * i) for i in range(1, n + 1))
    word = rng.choice(words)
    count = sum(ch in "aeiou" for ch in word)
    return f"How many vowels are in the word '{word}'?", f"The word '{word}' has {count} vowels."


def _multi_turn(rng: random.Random) -> list[dict]:
    question, answer, total, name, thing = _word_problem(rng)
    messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    extra = rng.randint(2, 9)
    messages += [
        {"role": "user", "content": f"And if {name} then found {extra} more {thing}?"},
        {"role": "assistant", "content": f"{total} + {extra} = {total + extra}.\n#### {total + extra}"},
    ]
    if rng.random() < 0.5:  # a third exchange
        messages += [
            {"role": "user", "content": "Double that, please."},
            {
                "role": "assistant",
                "content": f"2 x {total + extra} = {2 * (total + extra)}.\n#### {2 * (total + extra)}",
            },
        ]
    return messages


def _long(rng: random.Random) -> list[dict]:
    """A conversation far over 512 tokens (any tokenizer): a long list to add up, or a long table to write."""
    if rng.random() < 0.5:
        numbers = [rng.randint(100, 999) for _ in range(400)]
        prompt = "Add up these numbers: " + " ".join(map(str, numbers))
        return [{"role": "user", "content": prompt}, {"role": "assistant", "content": f"#### {sum(numbers)}"}]
    k = rng.randint(3, 19)
    table = "\n".join(f"{k} x {i} = {k * i}" for i in range(1, 301))
    return [
        {"role": "user", "content": f"Write the multiplication table of {k} from 1 to 300, one line each."},
        {"role": "assistant", "content": table},
    ]


def sft_records(count: int, seed: int = 0) -> list[dict]:
    """``count`` conversations, a pure function of the seed: 40 % one-turn word problems, 25 % instructions, 25 %
    multi-turn (2-3 exchanges), 10 % too long for a 512-token SFT; a third of them open with a system message."""
    rng = random.Random(seed)
    kinds = ["arithmetic"] * 8 + ["instructions"] * 5 + ["multi_turn"] * 5 + ["long_form"] * 2
    records = []
    for index in range(count):
        kind = kinds[index % len(kinds)]
        if kind == "arithmetic":
            question, answer, *_ = _word_problem(rng)
            messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        elif kind == "instructions":
            prompt, answer = _instruction(rng)
            messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]
        elif kind == "multi_turn":
            messages = _multi_turn(rng)
        else:
            messages = _long(rng)
        if rng.random() < 1 / 3:
            messages = [{"role": "system", "content": rng.choice(SYSTEMS)}, *messages]
        records.append({"id": f"mirror_{kind}_{index:05d}", "messages": messages, "source": f"mirror/{kind}"})
    rng.shuffle(records)
    return records


DATASET_CARD = """---
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*
---
# Dolci-Instruct-SFT (local stand-in)

Written by `mars mirror`: {count} synthetic conversations in the schema of allenai/Dolci-Instruct-SFT
(`id`, `messages` [{{role, content}}], `source`). Not the real data.
"""


def write_dataset(folder: Path, records: list[dict]) -> None:
    from datasets import Dataset

    (folder / "data").mkdir(parents=True, exist_ok=True)
    Dataset.from_list(records).to_parquet(str(folder / "data" / "train-00000-of-00001.parquet"))
    write_text_atomic(folder / "README.md", DATASET_CARD.format(count=len(records)))


# ----------------------------------------------------------------------------------------------------------------
# tokenizer and model


def train_qwen_like_tokenizer(texts: list[str], vocab_size: int = BPE_VOCAB):
    """A byte-level BPE with Qwen2's pre-tokenizer and normalizer, its added tokens after the BPE vocabulary (as
    Qwen's are), wrapped as transformers' ``Qwen2Tokenizer``."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX, Qwen2Tokenizer

    core = Tokenizer(models.BPE())
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer=trainer)
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    core.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    tokenizer = Qwen2Tokenizer(
        tokenizer_object=core,
        unk_token=None,
        bos_token=None,
        eos_token=EOS,
        pad_token=PAD,
        extra_special_tokens=SPECIAL_TOKENS[1:],
        errors="replace",
        model_max_length=131072,
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def stand_in_model(tokenizer, shape: Shape, seed: int):
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    pad_id, eos_id = tokenizer.convert_tokens_to_ids([PAD, EOS])
    config = Qwen2Config(
        vocab_size=len(tokenizer) + shape.extra_rows,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=shape.tie_word_embeddings,
        use_sliding_window=False,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.generation_config = GenerationConfig(
        bos_token_id=pad_id,
        pad_token_id=pad_id,
        eos_token_id=[eos_id, pad_id],
        do_sample=True,
        temperature=0.7,
        top_p=0.8,
        top_k=20,
        repetition_penalty=shape.repetition_penalty,
    )
    return model


# The draft entry of configs/paper-7b.yaml that starts from Qwen2.5-0.5B-Instruct (its models.<entry>.base_model)
DRAFT_STARTS = {"7b": ("draft_ar_sft_5ep", "0.5b")}


def overlay(
    shape_key: str, model_dir: Path, dataset_dir: Path, harness_dir: Path | None = None, draft_dir: Path | None = None
) -> dict:
    """The config keys that point a paper config at the mirror (its own name, so its results stay apart); for the
    7B config also its draft's start (``draft_dir``: the 0.5B stand-in)."""
    name = f"paper-{shape_key}-mirror"
    draft = {}
    if draft_dir is not None:
        entry, _ = DRAFT_STARTS[shape_key]
        draft = {"models": {entry: {"base_model": str(draft_dir.resolve())}}}
    return {
        "name": name,
        "world": {"base_model": str(model_dir.resolve()), "dataset": str(dataset_dir.resolve())},
        **draft,
        **({"eval": {"harness_data": str(harness_dir.resolve())}} if harness_dir else {}),
        "report": {"figures_dir": f"results/{name}/paper_figures", "tables_dir": f"results/{name}/tables"},
    }


def build_mirror(out: str | Path, shapes: list[str], records: int = 300, seed: int = 0) -> dict:
    """Write the stand-ins under ``out`` (which must not exist; built under ``out.tmp``, then renamed)."""
    import yaml

    from mars.evaluation.tasks.mirror import write_harness_mirror

    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        raise ConfigError(f"--shape must be one of {', '.join(SHAPES)} or both, got {unknown[0]!r}")
    if records < 20:
        raise ConfigError(f"--records must be at least 20 (every kind of conversation), got {records}")
    out = Path(out)
    if out.exists():
        raise ConfigError(f"mirror folder exists already (remove it first): {out}")
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    conversations = sft_records(records, seed)
    dataset_dir = tmp / "datasets" / DATASET_REPO.split("/")[-1]
    write_dataset(dataset_dir, conversations)
    write_harness_mirror(tmp / "harness")  # the six paper tasks' data sets (stand-in records, real HumanEval)
    # One tokenizer for both stand-ins, as Qwen2.5's sizes share theirs; trained on the mirror's own text.
    tokenizer = train_qwen_like_tokenizer([m["content"] for r in conversations for m in r["messages"]])
    summary = {"dataset": {"repo_id": DATASET_REPO, "records": len(conversations)}, "models": {}, "overlays": {}}
    # every stand-in a shape needs: its own, and its draft's start (the 7B config's Table 6)
    needed = list(dict.fromkeys(k for key in shapes for k in [key, *DRAFT_STARTS.get(key, ())[1:]]))
    for key in needed:
        shape = SHAPES[key]
        model = stand_in_model(tokenizer, shape, seed)
        model.save_pretrained(tmp / "models" / shape.folder, safe_serialization=True)
        tokenizer.save_pretrained(tmp / "models" / shape.folder)
        summary["models"][shape.repo_id] = {
            "folder": str((out / "models" / shape.folder).resolve()),
            "parameters": sum(p.numel() for p in model.parameters()),
            "vocab_rows": model.config.vocab_size,
            "tokenizer_size": len(tokenizer),
            "tie_word_embeddings": shape.tie_word_embeddings,
        }
    for key in shapes:
        final_model, final_dataset = out / "models" / SHAPES[key].folder, out / "datasets" / dataset_dir.name
        draft_dir = out / "models" / SHAPES[DRAFT_STARTS[key][1]].folder if key in DRAFT_STARTS else None
        overlay_path = tmp / f"paper-{key}-mirror.yaml"
        write_text_atomic(
            overlay_path,
            f"# point configs/paper-{key}.yaml at the local stand-ins written by `mars mirror`:\n"
            f"#   snakemake --configfile configs/paper-{key}.yaml {out.resolve() / overlay_path.name}\n"
            + yaml.safe_dump(overlay(key, final_model, final_dataset, out / "harness", draft_dir), sort_keys=False),
        )
        summary["overlays"][key] = str((out / overlay_path.name).resolve())
    summary["harness_data"] = str((out / "harness").resolve())
    summary["dataset"]["folder"] = str((out / "datasets" / dataset_dir.name).resolve())
    write_json_atomic(tmp / "mirror.json", summary)
    os.replace(tmp, out)
    return summary


def add_parser(commands) -> None:
    """``mars mirror`` (registered by mars.cli)."""
    mirror = commands.add_parser(
        "mirror",
        help="write local stand-ins of Qwen2.5-Instruct and Dolci-Instruct-SFT (small, random) to run the paper "
        "configs offline",
    )
    mirror.add_argument("--output", required=True, help="folder to create")
    mirror.add_argument("--shape", default="both", choices=[*SHAPES, "both"], help="which model stand-in(s)")
    mirror.add_argument("--records", type=int, default=300, help="conversations in the SFT data set")
    mirror.add_argument("--seed", type=int, default=0)
    mirror.set_defaults(run=_run)


def _run(args) -> None:
    shapes = list(SHAPES) if args.shape == "both" else [args.shape]
    print(json.dumps(build_mirror(args.output, shapes, args.records, args.seed), indent=2))
