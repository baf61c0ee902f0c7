"""The tiny world's data is a pure function of the config's ``world`` section: pinned bytes.

The hashes were recorded (scripts/world_data_hashes.py) before the task families were split into modules; any
change to a generator, to the order of draws or to a record's fields changes them.  If a change of the data is
intended, rerun the script and update the pins (and expect every trained model to change).
"""

from __future__ import annotations

import hashlib
import json

import pytest

from mars.world.tasks import FACTS_FAMILY, FAMILIES, few_shot_examples, make_pretrain, make_splits


def _jsonl_sha256(records: list[dict]) -> str:
    """sha256 of the jsonl file mars.training.data.write_jsonl writes for ``records`` (targets as build_world stores
    them)."""
    text = "".join(
        json.dumps(dict(r, target=json.dumps(r["target"], sort_keys=True)), sort_keys=True) + "\n" for r in records
    )
    return hashlib.sha256(text.encode()).hexdigest()


# (train_per_family, test_per_family, pretrain_per_family) of config.yaml and configs/smoke.yaml, seed 0.
PINNED = {
    "config.yaml": (
        (400, 100, 2000),
        {
            "train": "afce75f9220cec7f3b1777dc092b79dfe68a667bd9f87be1028738c2460a09a3",
            "test": "136989b2cfa1994eaf0a316568fa7006771dc315bfd3b52e1c58e2254c32720e",
            "pretrain": "b0f1e9f4c40b6ecaddb72e95e4ba1b93c55f2f3f338e3f75443fa32378be1c94",
        },
    ),
    "configs/smoke.yaml": (
        (48, 4, 24),
        {
            "train": "16206ef758bd9426f9eeab16ac3e058560185511614f3e86ef3e4296748b6b1f",
            "test": "f54dd39932e07c69de538d74f19d67c4d09b5208f35b88a38c06e3351708d71d",
            "pretrain": "4aa213300bc41d9edd0c7bb88a7d61c3fb6c1844b52e2e987367e895ee3c3534",
        },
    ),
}


@pytest.mark.parametrize("config", sorted(PINNED))
def test_world_data_is_byte_identical_to_the_pinned_build(config):
    (n_train, n_test, n_pretrain), expected = PINNED[config]
    train, test = make_splits(n_train, n_test, seed=0)
    got = {
        "train": _jsonl_sha256(train),
        "test": _jsonl_sha256(test),
        "pretrain": _jsonl_sha256(make_pretrain(n_pretrain, seed=0)),
    }
    assert got == expected


def test_the_pins_match_the_configs_world_sections():
    # The pinned sizes are the configs' own, so the test checks the data the pipeline really builds.
    yaml = pytest.importorskip("yaml")
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for config, ((n_train, n_test, n_pretrain), _) in PINNED.items():
        world = yaml.safe_load((root / config).read_text())["world"]
        assert (world["seed"], world["train_per_family"], world["test_per_family"], world["pretrain_per_family"]) == (
            0,
            n_train,
            n_test,
            n_pretrain,
        ), config


def test_few_shot_examples_are_byte_identical_to_the_pinned_draw():
    # Few-shot examples come from their own streams (lm-eval's shots): pinned separately from the splits.
    shots = [r for family in FAMILIES + (FACTS_FAMILY,) for r in few_shot_examples(family, 3, seed=0)]
    shots += [r for sub in ("boolean_expressions", "dyck_languages") for r in few_shot_examples("bbh", 2, subtask=sub)]
    assert _jsonl_sha256(shots) == "8800f2e13d01432f4ca7d296449ce11cf1d4f7e0f17077905f9f73aedad46a8f"
