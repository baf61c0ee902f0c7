"""Splits, pre-training corpus and few-shot draws over the registry: sizes, determinism, disjointness."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from mars.world import tasks as T
from mars.world.tasks import FAMILIES, common, few_shot_examples, gsm8k, ifeval, make_splits
from tests.world.tasks.helpers import N_TEST, N_TRAIN, by_family

# ---------------------------------------------------------------- structure


def test_family_names():
    assert FAMILIES == ("ifeval", "bbh", "mmlu_pro", "gpqa", "gsm8k", "humaneval")


def test_sizes_fields_ids(splits):
    train, test = splits
    counts_train = Counter(x["family"] for x in train)
    counts_test = Counter(x["family"] for x in test)
    for fam in FAMILIES:
        assert counts_train[fam] == N_TRAIN
        assert counts_test[fam] == N_TEST
    # fact teaching: 4 attributes x 2 phrasings + friend + summary per entity, 100 entities
    assert counts_train[T.FACTS_FAMILY] == 1000
    assert T.FACTS_FAMILY not in counts_test
    ids = [x["id"] for x in train + test]
    assert len(ids) == len(set(ids))
    for x in train + test:
        extra = {"messages"} if x["family"] == "bbh" and "messages" in x else set()
        assert set(x) == {"family", "id", "prompt", "response", "target"} | extra
        assert isinstance(x["prompt"], str) and x["prompt"].strip()
        assert isinstance(x["response"], str) and x["response"].strip()
    json.loads(json.dumps(train + test))  # JSON serialisable


def test_zero_sizes():
    train, test = make_splits(0, 0, seed=3)
    assert test == []
    assert {x["family"] for x in train} == {T.FACTS_FAMILY}


def test_unique_prompts_within_split(splits):
    train, test = splits
    for exs in (train, test):
        prompts = [x["prompt"] for x in exs]
        assert len(prompts) == len(set(prompts))


def test_lengths_short(splits):
    train, test = splits
    for x in train + test:
        n = len(x["prompt"].split()) + len(x["response"].split())
        assert 5 <= n <= 90, (x["family"], n, x["prompt"], x["response"])


# ------------------------------------------------------- determinism, splits


def test_determinism_and_seed_dependence():
    a = make_splits(15, 10, seed=1)
    b = make_splits(15, 10, seed=1)
    c = make_splits(15, 10, seed=2)
    assert json.dumps(a) == json.dumps(b)
    assert json.dumps(a) != json.dumps(c)
    for fam in FAMILIES:  # every family individually depends on the seed
        pa = [x["prompt"] for x in by_family(a[1], fam)]
        pc = [x["prompt"] for x in by_family(c[1], fam)]
        assert pa != pc, fam


def test_smaller_sizes_are_prefixes():
    small_train, small_test = make_splits(10, 5, seed=4)
    big_train, big_test = make_splits(25, 12, seed=4)
    for fam in FAMILIES:
        assert [x["prompt"] for x in by_family(small_train, fam)] == [x["prompt"] for x in by_family(big_train, fam)][
            :10
        ]
        assert [x["prompt"] for x in by_family(small_test, fam)] == [x["prompt"] for x in by_family(big_test, fam)][:5]


def test_no_test_prompt_in_train():
    for seed in (0, 1):
        train, test = make_splits(200, 80, seed=seed)
        train_prompts = {x["prompt"] for x in train}
        assert not [x["prompt"] for x in test if x["prompt"] in train_prompts]


def _gsm_problem(prompt: str):
    """Name/item/pronoun independent identity of a word problem: (skeleton, numbers)."""
    numbers = tuple(re.findall(r"\d+", prompt))
    sk = re.sub(r"\d+", "#", prompt)
    for name in gsm8k._GSM_MALE + gsm8k._GSM_FEMALE:
        sk = re.sub(rf"\b{name}\b", "N", sk)
    for item in gsm8k._GSM_ITEMS:
        sk = re.sub(rf"\b{item}\b", "I", sk)
    sk = re.sub(r"\b([Hh]e|[Ss]he)\b", "P", sk)
    return sk, numbers


def _he_problem(prompt: str):
    """Identity of a humaneval problem independent of function/parameter names."""
    m = re.match(r"Write a Python function `(\w+)\((\w+)\)` that (.*)\.$", prompt)
    assert m, prompt
    param = m.group(2)
    return re.sub(rf"\b{param}\b", "P", m.group(3))


def _ifeval_problem(ex):
    first = ex["prompt"].split(".")[0]
    topic = [t for t in ifeval.IFEVAL_TOPICS if re.search(rf"\b{t}\b", first)]
    assert len(topic) >= 1
    topic = max(topic, key=len)
    tgt = ex["target"]
    return topic, json.dumps(
        sorted(zip(tgt["instruction_id_list"], [json.dumps(k, sort_keys=True) for k in tgt["kwargs"]]))
    )


def test_underlying_problems_disjoint():
    train, test = make_splits(400, 100, seed=0)
    for fam, ident in (
        ("gsm8k", lambda x: _gsm_problem(x["prompt"])),
        ("humaneval", lambda x: _he_problem(x["prompt"])),
        ("ifeval", _ifeval_problem),
        ("bbh", lambda x: x["prompt"]),
    ):
        tr = {ident(x) for x in by_family(train, fam)}
        te = [ident(x) for x in by_family(test, fam)]
        assert len(te) == len(set(te)), f"{fam}: duplicated test problem"
        assert not tr.intersection(te), fam
    # humaneval: test functions are new constants of templates seen in train
    for x in by_family(test, "humaneval"):
        assert re.search(r"\d", _he_problem(x["prompt"])), x["prompt"]


def test_pretrain_corpus_is_fresh_and_holds_no_test_problem():
    train, test = make_splits(400, 100, seed=0)
    pretrain = T.make_pretrain(500, seed=0)
    assert T.make_pretrain(500, seed=0) == pretrain  # deterministic
    smaller = T.make_pretrain(200, seed=0)
    for fam in FAMILIES:  # a smaller corpus is a prefix of a larger one, family by family
        assert [x["prompt"] for x in by_family(smaller, fam)] == [x["prompt"] for x in by_family(pretrain, fam)][:200]
    for fam, ident in (
        ("gsm8k", lambda x: _gsm_problem(x["prompt"])),
        ("humaneval", lambda x: _he_problem(x["prompt"])),
        ("ifeval", _ifeval_problem),
        ("bbh", lambda x: x["prompt"]),
    ):
        pre = [ident(x) for x in by_family(pretrain, fam)]
        assert len(pre) == 500
        assert not set(pre) & {ident(x) for x in by_family(test, fam)}, fam
        # mostly prompts the SFT set does not hold: fresh practice, not the same examples again
        sft = {x["prompt"] for x in by_family(train, fam)}
        assert sum(x["prompt"] not in sft for x in by_family(pretrain, fam)) > 0.5 * len(pre), fam
    fb = T.fact_base(0)
    held_out = {tuple(x) for x in fb["test_facts"]}
    assert not {(x["target"]["entity"], x["target"]["attribute"]) for x in by_family(pretrain, "mmlu_pro")} & held_out
    assert not {x["target"]["entity"] for x in by_family(pretrain, "gpqa")} & set(fb["test_sources"])
    assert len(by_family(pretrain, T.FACTS_FAMILY)) == len(by_family(train, T.FACTS_FAMILY))


def test_fact_questions_disjoint_but_taught():
    train, test = make_splits(300, 100, seed=0)
    taught = {x["prompt"]: x["response"] for x in by_family(train, T.FACTS_FAMILY)}
    train_mc = {(x["target"]["entity"], x["target"]["attribute"]) for x in by_family(train, "mmlu_pro")}
    test_mc = [(x["target"]["entity"], x["target"]["attribute"]) for x in by_family(test, "mmlu_pro")]
    assert len(test_mc) == len(set(test_mc)) == 100
    assert not train_mc.intersection(test_mc)
    for x in by_family(test, "mmlu_pro"):
        question = x["prompt"].split("Question: ")[1].split("\n")[0]
        value = x["target"]["options"][T.LETTERS.index(x["target"]["answer"])]
        assert question in taught, question  # the fact is taught in train
        assert taught[question].rstrip(".").endswith(" " + value)
    train_src = {x["target"]["entity"] for x in by_family(train, "gpqa")}
    test_src = [x["target"]["entity"] for x in by_family(test, "gpqa")]
    assert not train_src.intersection(test_src)
    assert len(set((x["target"]["entity"], x["target"]["attribute"]) for x in by_family(test, "gpqa"))) == 100
    for x in by_family(test, "gpqa"):
        e, f = x["target"]["entity"], x["target"]["friend"]
        assert taught[f"Who is the friend of the {e}?"] == f"The friend of the {e} is the {f}."


# -------------------------------------------------------------- few-shot


def test_few_shot_examples():
    shots = few_shot_examples("bbh", 3, seed=0)
    assert len(shots) == 3 and all(s["family"] == "bbh" for s in shots)
    assert shots == few_shot_examples("bbh", 3, seed=0)
    assert few_shot_examples("bbh", 3, seed=1) != shots
    for sub in T.BBH_SUBTASKS:
        ss = few_shot_examples("bbh", 3, seed=0, subtask=sub)
        assert [s["target"]["subtask"] for s in ss] == [sub] * 3
    with pytest.raises(ValueError):
        few_shot_examples("bbh", 3, subtask="navigate")
    with pytest.raises(ValueError):
        few_shot_examples("gsm8k", 3, subtask="word_sorting")
    with pytest.raises(ValueError):
        few_shot_examples("bbh", -1)
    assert few_shot_examples("gsm8k", 0) == []
    assert len(few_shot_examples(T.FACTS_FAMILY, 2)) == 2


def test_few_shot_never_test_problems():
    for seed in (0, 7):
        _, test = make_splits(0, 100, seed=seed)
        test_prompts = {x["prompt"] for x in test}
        test_facts = {(x["target"]["entity"], x["target"]["attribute"]) for x in by_family(test, "mmlu_pro")}
        test_src = {x["target"]["entity"] for x in by_family(test, "gpqa")}
        he_test = {_he_problem(x["prompt"]) for x in by_family(test, "humaneval")}
        gsm_test = {_gsm_problem(x["prompt"]) for x in by_family(test, "gsm8k")}
        for fam in FAMILIES:
            shots = few_shot_examples(fam, 25, seed=seed)
            assert len(shots) == 25
            assert not [s for s in shots if s["prompt"] in test_prompts]
            for s in shots:
                if fam == "mmlu_pro":
                    assert (s["target"]["entity"], s["target"]["attribute"]) not in test_facts
                if fam == "gpqa":
                    assert s["target"]["entity"] not in test_src
                if fam == "humaneval":
                    assert _he_problem(s["prompt"]) not in he_test
                if fam == "gsm8k":
                    assert _gsm_problem(s["prompt"]) not in gsm_test


# ------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("n_train,n_test", [(-1, 5), (5, -1), (1.5, 5), (5, "3"), (True, 5)])
def test_bad_sizes_raise(n_train, n_test):
    with pytest.raises(ValueError):
        make_splits(n_train, n_test)


def test_too_many_test_questions_raise():
    make_splits(0, 100)  # exactly the held-out capacity of mmlu_pro / gpqa
    with pytest.raises(ValueError, match="mmlu_pro"):
        make_splits(0, 101)


def test_exhausted_space_raises(monkeypatch):
    monkeypatch.setattr(common, "STALL_LIMIT", 200)
    with pytest.raises(ValueError, match="humaneval"):
        T.REGISTRY["humaneval"].generate("test", 1000, 0, "test")
