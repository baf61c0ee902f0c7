"""Tests for mars.world.tasks: generation, splits, extraction and scoring."""

from __future__ import annotations

import json
import re
import types
from collections import Counter

import pytest

from mars.sandbox import checks
from mars.world import tasks as T
from mars.world.tasks import FAMILIES, extract_answer, few_shot_examples, make_splits, score

N_TRAIN, N_TEST = 60, 40


@pytest.fixture(scope="module")
def splits():
    return make_splits(N_TRAIN, N_TEST, seed=0)


def _fake_runner(program: str, timeout_s: float):
    """In-process stand-in for mars.sandbox.supervisor.run_python (only for our own gold code)."""
    import contextlib
    import io

    ns: dict = {}
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(program, "<candidate>", "exec"), ns)
        passed = True
    except BaseException:
        passed = False
    return types.SimpleNamespace(passed=passed, program=program, timeout_s=timeout_s, stdout=out.getvalue())


@pytest.fixture
def fake_sandbox(monkeypatch):
    calls = []

    def run_python(program, timeout_s):
        calls.append((program, timeout_s))
        return _fake_runner(program, timeout_s)

    # run_tests (the marker logic) stays real; only the process it would start is replaced.
    monkeypatch.setattr(checks, "run_python", run_python)
    return calls


def _by_family(exs, fam):
    return [x for x in exs if x["family"] == fam]


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
        pa = [x["prompt"] for x in _by_family(a[1], fam)]
        pc = [x["prompt"] for x in _by_family(c[1], fam)]
        assert pa != pc, fam


def test_smaller_sizes_are_prefixes():
    small_train, small_test = make_splits(10, 5, seed=4)
    big_train, big_test = make_splits(25, 12, seed=4)
    for fam in FAMILIES:
        assert [x["prompt"] for x in _by_family(small_train, fam)] == \
               [x["prompt"] for x in _by_family(big_train, fam)][:10]
        assert [x["prompt"] for x in _by_family(small_test, fam)] == \
               [x["prompt"] for x in _by_family(big_test, fam)][:5]


def test_no_test_prompt_in_train():
    for seed in (0, 1):
        train, test = make_splits(200, 80, seed=seed)
        train_prompts = {x["prompt"] for x in train}
        assert not [x["prompt"] for x in test if x["prompt"] in train_prompts]


def _gsm_problem(prompt: str):
    """Name/item/pronoun independent identity of a word problem: (skeleton, numbers)."""
    numbers = tuple(re.findall(r"\d+", prompt))
    sk = re.sub(r"\d+", "#", prompt)
    for name in T._GSM_MALE + T._GSM_FEMALE:
        sk = re.sub(rf"\b{name}\b", "N", sk)
    for item in T._GSM_ITEMS:
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
    topic = [t for t in T.IFEVAL_TOPICS if re.search(rf"\b{t}\b", first)]
    assert len(topic) >= 1
    topic = max(topic, key=len)
    tgt = ex["target"]
    return topic, json.dumps(sorted(zip(tgt["instruction_id_list"], [json.dumps(k, sort_keys=True) for k in tgt["kwargs"]])))


def test_underlying_problems_disjoint():
    train, test = make_splits(400, 100, seed=0)
    for fam, ident in (("gsm8k", lambda x: _gsm_problem(x["prompt"])),
                       ("humaneval", lambda x: _he_problem(x["prompt"])),
                       ("ifeval", _ifeval_problem),
                       ("bbh", lambda x: x["prompt"])):
        tr = {ident(x) for x in _by_family(train, fam)}
        te = [ident(x) for x in _by_family(test, fam)]
        assert len(te) == len(set(te)), f"{fam}: duplicated test problem"
        assert not tr.intersection(te), fam
    # humaneval: test functions are new constants of templates seen in train
    for x in _by_family(test, "humaneval"):
        assert re.search(r"\d", _he_problem(x["prompt"])), x["prompt"]


def test_pretrain_corpus_is_fresh_and_holds_no_test_problem():
    train, test = make_splits(400, 100, seed=0)
    pretrain = T.make_pretrain(500, seed=0)
    assert T.make_pretrain(500, seed=0) == pretrain  # deterministic
    smaller = T.make_pretrain(200, seed=0)
    for fam in FAMILIES:  # a smaller corpus is a prefix of a larger one, family by family
        assert [x["prompt"] for x in _by_family(smaller, fam)] == [x["prompt"] for x in _by_family(pretrain, fam)][:200]
    for fam, ident in (("gsm8k", lambda x: _gsm_problem(x["prompt"])),
                       ("humaneval", lambda x: _he_problem(x["prompt"])),
                       ("ifeval", _ifeval_problem),
                       ("bbh", lambda x: x["prompt"])):
        pre = [ident(x) for x in _by_family(pretrain, fam)]
        assert len(pre) == 500
        assert not set(pre) & {ident(x) for x in _by_family(test, fam)}, fam
        # mostly prompts the SFT set does not hold: fresh practice, not the same examples again
        sft = {x["prompt"] for x in _by_family(train, fam)}
        assert sum(x["prompt"] not in sft for x in _by_family(pretrain, fam)) > 0.5 * len(pre), fam
    fb = T.fact_base(0)
    held_out = {tuple(x) for x in fb["test_facts"]}
    assert not {(x["target"]["entity"], x["target"]["attribute"]) for x in _by_family(pretrain, "mmlu_pro")} & held_out
    assert not {x["target"]["entity"] for x in _by_family(pretrain, "gpqa")} & set(fb["test_sources"])
    assert len(_by_family(pretrain, T.FACTS_FAMILY)) == len(_by_family(train, T.FACTS_FAMILY))


def test_fact_questions_disjoint_but_taught():
    train, test = make_splits(300, 100, seed=0)
    taught = {x["prompt"]: x["response"] for x in _by_family(train, T.FACTS_FAMILY)}
    train_mc = {(x["target"]["entity"], x["target"]["attribute"]) for x in _by_family(train, "mmlu_pro")}
    test_mc = [(x["target"]["entity"], x["target"]["attribute"]) for x in _by_family(test, "mmlu_pro")]
    assert len(test_mc) == len(set(test_mc)) == 100
    assert not train_mc.intersection(test_mc)
    for x in _by_family(test, "mmlu_pro"):
        question = x["prompt"].split("Question: ")[1].split("\n")[0]
        value = x["target"]["options"][T.LETTERS.index(x["target"]["answer"])]
        assert question in taught, question  # the fact is taught in train
        assert taught[question].rstrip(".").endswith(" " + value)
    train_src = {x["target"]["entity"] for x in _by_family(train, "gpqa")}
    test_src = [x["target"]["entity"] for x in _by_family(test, "gpqa")]
    assert not train_src.intersection(test_src)
    assert len(set((x["target"]["entity"], x["target"]["attribute"]) for x in _by_family(test, "gpqa"))) == 100
    for x in _by_family(test, "gpqa"):
        e, f = x["target"]["entity"], x["target"]["friend"]
        assert taught[f"Who is the friend of the {e}?"] == f"The friend of the {e} is the {f}."


# ----------------------------------------------------------- gold correctness


def test_gold_scores_one_everywhere(splits, fake_sandbox):
    train, test = splits
    for x in train + test:
        metrics = score(x["family"], x["response"], x["target"])
        assert metrics and all(v == 1.0 for k, v in metrics.items() if k not in ("inst_passed", "inst_total")), \
            (x["family"], x["prompt"], x["response"], metrics)
        if x["family"] == "ifeval":
            assert metrics["inst_passed"] == metrics["inst_total"] == len(x["target"]["instruction_id_list"])
    assert len(fake_sandbox) == N_TRAIN + N_TEST  # every humaneval gold went through the runner


def test_gold_with_trailing_whitespace(splits, fake_sandbox):
    train, test = splits
    for x in test:
        padded = "  " + x["response"] + " \n\n" if x["family"] != "humaneval" else x["response"] + "\n\n"
        metrics = score(x["family"], padded, x["target"])
        assert metrics[next(iter(metrics))] == 1.0, (x["family"], padded)


def test_bbh_gold_independently_correct():
    exs = make_splits(300, 0, seed=5)[0]
    seen = Counter()
    for x in _by_family(exs, "bbh"):
        sub, ans, p = x["target"]["subtask"], x["target"]["answer"], x["prompt"]
        seen[sub] += 1
        assert x["response"].startswith("Let's think step by step.")
        assert x["response"].endswith(f"So the answer is {ans}.")
        if sub == "boolean_expressions":
            assert str(eval(p.split(": ", 1)[1])) == ans
        elif sub == "multistep_arithmetic":
            assert str(eval(p.split(": ", 1)[1].rstrip("= "))) == ans
        elif sub == "word_sorting":
            words = p.split("List: ")[1].split()
            assert ans == " ".join(sorted(words))
        elif sub == "dyck_languages":
            seq = p.split("Input: ")[1].split() + ans.split()
            stack = []
            pairs = {")": "(", "]": "[", "}": "{", ">": "<"}
            for tok in seq:
                if tok in pairs:
                    assert stack and stack.pop() == pairs[tok]
                else:
                    stack.append(tok)
            assert not stack and ans
        elif sub == "object_counting":
            cat = re.search(r"How many (.+) do I have\?", p).group(1)
            words = {"a": 1, "two": 2, "three": 3}
            total = 0
            for cnt, noun in re.findall(r"\b(a|two|three) (\w+)", p):
                singular = noun[:-2] if noun.endswith("ches") else noun[:-1] if cnt != "a" else noun
                if singular in T._BBH_OBJECTS[cat]:
                    total += words[cnt]
            assert str(total) == ans
    assert set(seen) == set(T.BBH_SUBTASKS)


def test_gsm8k_gold_steps_are_arithmetic():
    exs = make_splits(200, 50, seed=6)
    for x in _by_family(exs[0] + exs[1], "gsm8k"):
        steps = re.findall(r"(\d+) ([-+*/]) (\d+) = (\d+)", x["response"])
        assert 2 <= len(steps) <= 3
        for a, op, b, c in steps:
            assert eval(f"{a} {op} {b}") == int(c)
        assert x["response"].endswith(f"\n#### {steps[-1][3]}")
        assert x["target"]["answer"] == steps[-1][3]


def test_mc_options_well_formed(splits):
    train, test = splits
    for x in _by_family(train + test, "mmlu_pro"):
        opts = x["target"]["options"]
        assert len(opts) == len(set(opts)) == 10
        for i, o in enumerate(opts):
            assert f"\n{'ABCDEFGHIJ'[i]}. {o}" in x["prompt"]
        assert x["response"].endswith(f"The answer is ({x['target']['answer']}).")
    for x in _by_family(train + test, "gpqa"):
        opts = x["target"]["options"]
        assert len(opts) == len(set(opts)) == 4
        for i, o in enumerate(opts):
            assert f"\n({'ABCD'[i]}) {o}" in x["prompt"]
        assert opts[T.LETTERS.index(x["target"]["answer"])] == x["target"]["value"]


def test_mc_answers_walk_the_prompt_options_up_to_the_answer(splits):
    train, test = splits
    for x in _by_family(train + test, "mmlu_pro") + _by_family(train + test, "gpqa"):
        listed = re.findall(r"^\(?([A-J])[.)] (\w+)$", x["prompt"], flags=re.M)  # the options as the prompt shows them
        walked = re.findall(r"\b([A-J]) is (\w+)(?:, not (\w+))?\.", x["response"])
        letter = x["response"][-3]
        assert [w[:2] for w in walked] == listed[:len(walked)], x["response"]
        assert walked[-1][0] == letter == x["target"]["answer"] and walked[-1][2] == ""  # stops at the answer
        value = x["target"]["options"][T.LETTERS.index(letter)]
        assert walked[-1][1] == value and all(w[2] == value != w[1] for w in walked[:-1])


def test_mc_gold_consistent_with_fact_base():
    fb = T.fact_base(0)
    train, test = make_splits(50, 50, seed=0)
    for x in _by_family(train + test, "mmlu_pro"):
        t = x["target"]
        assert t["options"][T.LETTERS.index(t["answer"])] == fb["attrs"][t["entity"]][t["attribute"]]
    for x in _by_family(train + test, "gpqa"):
        t = x["target"]
        assert fb["friend"][t["entity"]] == t["friend"]
        assert t["options"][T.LETTERS.index(t["answer"])] == fb["attrs"][t["friend"]][t["attribute"]]
    assert T.fact_base(0) == fb and T.fact_base(1) != fb
    assert all(e != f for e, f in fb["friend"].items())


# ------------------------------------------------------ incorrect / edge cases


def test_incorrect_answers_score_zero(fake_sandbox):
    assert score("bbh", "Let's think step by step. So the answer is True.", {"answer": "False"}) == {"exact_match": 0.0}
    assert score("bbh", "So the answer is 14.", {"answer": "41"})["exact_match"] == 0.0
    assert score("bbh", "So the answer is cup sun pig.", {"answer": "cup pig sun"})["exact_match"] == 0.0
    assert score("mmlu_pro", "The zorp is red. The answer is (B).", {"answer": "D"})["exact_match"] == 0.0
    assert score("gpqa", "The answer is (A).", {"answer": "C"})["exact_match"] == 0.0
    assert score("gsm8k", "5 + 6 = 12.\n#### 12", {"answer": "11"}) == \
        {"exact_match": 0.0, "exact_match_flexible": 0.0}
    tgt = {"entry_point": "add_three", "test": "def check(candidate):\n    assert candidate(1) == 4\n\n\ncheck(add_three)\n"}
    assert score("humaneval", "```python\ndef add_three(x):\n    return x + 2\n```", tgt) == {"pass@1": 0.0}
    assert score("humaneval", "```python\ndef add_three(x):\n    return x + 3\n```", tgt) == {"pass@1": 1.0}
    m = score("ifeval", "Cats are soft.", {"instruction_id_list": [T.I_UPPER], "kwargs": [{}]})
    assert m == {"prompt_level_strict_acc": 0.0, "inst_level_strict_acc": 0.0, "inst_passed": 0.0, "inst_total": 1.0}


def test_letter_extraction_formats():
    for text in ["The answer is (C).", "answer is C", "the answer is c", "The answer is: (C)",
                 "Answer: C", "(C)", " C. ", "blah\nThe answer is (A).\nThe answer is (C).  \n\n"]:
        assert extract_answer("mmlu_pro", text) == "C", text
        assert score("mmlu_pro", text, {"answer": "C"})["exact_match"] == 1.0, text
    for text in ["", "   ", "The answer is (K).", "I don't know", "The answer is", "answer is carrots"]:
        assert extract_answer("mmlu_pro", text) is None, text
        assert score("mmlu_pro", text, {"answer": "C"})["exact_match"] == 0.0
    assert extract_answer("mmlu_pro", "The answer is (J).") == "J"
    assert extract_answer("gpqa", "The answer is (J).") is None  # only A-D exist
    assert extract_answer("gpqa", "so the answer is (d)") == "D"


def test_bbh_extraction_formats():
    assert extract_answer("bbh", "So the answer is False.") == "False"
    assert score("bbh", "so the answer is false", {"answer": "False"})["exact_match"] == 1.0
    assert score("bbh", "So the answer is:   cup  pig sun . \n", {"answer": "cup pig sun"})["exact_match"] == 1.0
    assert score("bbh", "So the answer is ] } ).", {"answer": "] } )"})["exact_match"] == 1.0
    assert score("bbh", "the answer is -10.\n\nQ: next question", {"answer": "-10"})["exact_match"] == 1.0
    assert score("bbh", "The answer is 3. Actually the answer is 4.", {"answer": "4"})["exact_match"] == 1.0
    assert score("bbh", "False", {"answer": "False"})["exact_match"] == 0.0  # no "answer is": invalid
    assert extract_answer("bbh", "") is None


def test_gsm8k_strict_vs_flexible():
    assert score("gsm8k", "5 + 6 = 11. The answer is 11.", {"answer": "11"}) == \
        {"exact_match": 0.0, "exact_match_flexible": 1.0}
    assert score("gsm8k", "#### 11.0", {"answer": "11"})["exact_match"] == 1.0
    assert score("gsm8k", "####11\n\n", {"answer": "11"})["exact_match"] == 1.0
    assert score("gsm8k", "#### $1,100.", {"answer": "1100"}) == {"exact_match": 1.0, "exact_match_flexible": 1.0}
    assert score("gsm8k", "#### -3", {"answer": "-3"})["exact_match"] == 1.0
    assert score("gsm8k", "#### 11\nwait, 12", {"answer": "11"}) == {"exact_match": 1.0, "exact_match_flexible": 0.0}
    assert extract_answer("gsm8k", "no number here") is None
    assert score("gsm8k", "", {"answer": "11"}) == {"exact_match": 0.0, "exact_match_flexible": 0.0}


def test_code_extraction():
    assert T.extract_code("Here:\n```python\ndef f(x):\n    return x\n```\nDone.") == "def f(x):\n    return x\n"
    assert T.extract_code("```py\ndef f(x):\n    return x\n```") == "def f(x):\n    return x\n"
    assert T.extract_code("```\ndef f(x): return 1\n```") == "def f(x): return 1\n"
    assert T.extract_code("```python\ndef f(x):\n    return x") == "def f(x):\n    return x"  # truncated
    assert T.extract_code("def f(x):\n    return x") == "def f(x):\n    return x"
    assert T.extract_code("```python\na = 1\n```\n```python\nb = 2\n```") == "a = 1\n"


def test_humaneval_program_sent_to_sandbox(fake_sandbox):
    x = _by_family(make_splits(5, 5, seed=0)[1], "humaneval")[0]
    assert score("humaneval", x["response"], x["target"]) == {"pass@1": 1.0}
    program, timeout = fake_sandbox[-1]
    assert program.startswith("def " + x["target"]["entry_point"])
    assert x["target"]["test"] in program and f"check({x['target']['entry_point']})" in program
    assert timeout == T.HUMANEVAL_TIMEOUT_S
    n = len(fake_sandbox)
    assert score("humaneval", "", x["target"]) == {"pass@1": 0.0}
    assert len(fake_sandbox) == n  # empty code never reaches the sandbox


def test_humaneval_sandbox_errors_score_zero(monkeypatch):
    def boom(program, timeout_s):
        raise RuntimeError("sandbox exploded")

    monkeypatch.setattr(checks, "run_python", boom)
    assert score("humaneval", "def f(): pass", {"test": "assert True"}) == {"pass@1": 0.0}


def test_garbage_never_raises(splits, fake_sandbox):
    _, test = splits
    garbage = ["", " ", "\n\n", "asdf qwer", "####", "answer is", "```", "```python\n", "((((", "\x00\x01",
               "The answer is (", "#### abc", "* \n* \n", '"', None]
    for fam in FAMILIES:
        x = _by_family(test, fam)[0]
        for g in garbage:
            metrics = score(fam, g, x["target"])
            assert all(v == 0.0 for k, v in metrics.items() if k != "inst_total"), (fam, g, metrics)
            extract_answer(fam, g)


def test_unknown_family_raises():
    with pytest.raises(ValueError):
        score("mmlu", "x", {"answer": "A"})
    with pytest.raises(ValueError):
        extract_answer("nope", "x")
    with pytest.raises(ValueError):
        few_shot_examples("nope", 3)


# ------------------------------------------------------------- ifeval checks

CHECK_CASES = [
    # (instruction id, kwargs, passing text, failing text)
    (T.I_LOWER, {}, "cats are soft. they sleep.", "Cats are soft."),
    (T.I_UPPER, {}, "CATS ARE SOFT. IS THERE ANYTHING ELSE?", "CATS are soft."),
    (T.I_KEYWORD, {"keywords": ["warm"]}, "It feels WARM today.", "It feels warmer today."),
    (T.I_END, {"end_phrase": "Is there anything else?"}, '"Cats are soft. is there anything else?"  \n',
     "Is there anything else? Cats are soft."),
    (T.I_BULLETS, {"num_bullets": 3}, "* one\n* two\n* three", "* one\n* two"),
    (T.I_BULLETS, {"num_bullets": 2}, "- one\n  * two\nThat is all.", "* one\n** two\n* three\n- four"),
    (T.I_QUOTES, {}, '  "Cats are soft."\n', 'Cats are "soft".'),
    (T.I_SENTENCES, {"num_sentences": 2, "relation": "exactly"}, "Cats are soft. They sleep!",
     "Cats are soft. They sleep. Cats play."),
    (T.I_SENTENCES, {"num_sentences": 1, "relation": "exactly"}, '"Cats are soft."', "Cats are soft? Yes."),
    (T.I_FIRST_WORD, {"first_word": "Well"}, '"well, cats are soft."', "Cats are soft. Well."),
    (T.I_FIRST_WORD, {"first_word": "Sure"}, "SURE! Cats.", "Surely cats."),
]


@pytest.mark.parametrize("inst,kwargs,good,bad", CHECK_CASES)
def test_ifeval_checkers(inst, kwargs, good, bad):
    assert T.check_instruction(inst, good, kwargs) is True
    assert T.check_instruction(inst, bad, kwargs) is False
    assert T.check_instruction(inst, "", kwargs) is False


def test_ifeval_counters():
    assert T.count_sentences("One. Two! Three? Four") == 4
    assert T.count_sentences('"Cats are soft. They sleep."') == 2
    assert T.count_sentences("") == 0
    assert T.count_bullets("* a\n* b\n- c\nnot\n**bold**") == 3


def test_ifeval_partial_credit_and_counts():
    target = {"instruction_id_list": [T.I_LOWER, T.I_KEYWORD], "kwargs": [{}, {"keywords": ["calm"]}]}
    assert score("ifeval", "cats are soft.", target) == {
        "prompt_level_strict_acc": 0.0, "inst_level_strict_acc": 0.5, "inst_passed": 1.0, "inst_total": 2.0}
    assert score("ifeval", "cats are calm.\n", target)["prompt_level_strict_acc"] == 1.0
    with pytest.raises(ValueError):
        T.check_instruction("no:such_instruction", "x")


def test_ifeval_covers_all_instructions():
    exs = make_splits(400, 0, seed=0)[0]
    used = Counter(i for x in _by_family(exs, "ifeval") for i in x["target"]["instruction_id_list"])
    assert set(used) == set(T.IFEVAL_INSTRUCTIONS)
    n_inst = Counter(len(x["target"]["instruction_id_list"]) for x in _by_family(exs, "ifeval"))
    assert set(n_inst) == {1, 2}


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
        test_facts = {(x["target"]["entity"], x["target"]["attribute"]) for x in _by_family(test, "mmlu_pro")}
        test_src = {x["target"]["entity"] for x in _by_family(test, "gpqa")}
        he_test = {_he_problem(x["prompt"]) for x in _by_family(test, "humaneval")}
        gsm_test = {_gsm_problem(x["prompt"]) for x in _by_family(test, "gsm8k")}
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
    monkeypatch.setattr(T, "_STALL_LIMIT", 200)
    with pytest.raises(ValueError, match="humaneval"):
        T._draw("humaneval", "test", 1000, 0, "test")


# -------------------------------------------------------- the real sandbox


def test_real_sandbox_scores_gold_and_wrong_code():
    # No skip: humaneval scoring without a working sandbox is a broken evaluation, and must fail here.
    test = make_splits(0, 8, seed=0)[1]
    for x in _by_family(test, "humaneval"):
        assert score("humaneval", x["response"], x["target"]) == {"pass@1": 1.0}, x["response"]
        name = x["target"]["entry_point"]
        wrong = f"```python\ndef {name}(*args):\n    return None\n```"
        assert score("humaneval", wrong, x["target"]) == {"pass@1": 0.0}
    assert score("humaneval", "import sys\nsys.exit(3)", {"test": "assert True"}) == {"pass@1": 0.0}


def test_humaneval_early_exit_does_not_pass():
    """A program that exits 0 before the asserts run is a failure (real sandbox)."""
    x = _by_family(make_splits(5, 5, seed=0)[1], "humaneval")[0]
    assert score("humaneval", x["response"], x["target"]) == {"pass@1": 1.0}
    cheat = "```python\nimport sys\nsys.exit(0)\n```"
    assert score("humaneval", cheat, x["target"]) == {"pass@1": 0.0}
    cheat = "```python\nimport os\nos._exit(0)\n```"
    assert score("humaneval", cheat, x["target"]) == {"pass@1": 0.0}


def test_bbh_shot_context_matches_the_tiny_eval_shot(splits):
    """Half the bbh train records past the first three of a subtask are 1-shot conversations whose shot is the first
    train record of that subtask (what lm-eval's first_n sampler picks); the eval's shot records stay plain."""
    from mars.eval_tasks import FEWSHOT

    assert FEWSHOT["bbh"] <= T.BBH_EVAL_SHOTS
    train, _ = splits
    bbh = _by_family(train, "bbh")
    by_sub: dict[str, list[dict]] = {}
    for rec in bbh:
        by_sub.setdefault(rec["target"]["subtask"], []).append(rec)
    with_context = 0
    for sub, recs in by_sub.items():
        assert all("messages" not in r for r in recs[: T.BBH_EVAL_SHOTS])
        for r in recs[T.BBH_EVAL_SHOTS:]:
            if "messages" in r:
                with_context += 1
                shot = recs[0]
                assert r["messages"] == [{"role": "user", "content": shot["prompt"]},
                                         {"role": "assistant", "content": shot["response"]},
                                         {"role": "user", "content": r["prompt"]}]
    assert abs(with_context - (len(bbh) - T.BBH_EVAL_SHOTS * len(by_sub)) / 2) <= len(by_sub)
