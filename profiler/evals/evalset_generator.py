"""The procedurally generated part of the built-in eval sets, and the held-out set.

`python -m profiler.evals.evalset_generator` rewrites `profiler/evalsets/<category>-generated.jsonl`
(GENERATED items per category, profiled with the hand-written `<category>.jsonl`) and
`profiler/evalsets/holdout/<category>.jsonl` (HOLDOUT items per category that no built-in set
holds: the demo reports accuracy on these, never on the items it profiled on). Deterministic:
the same seed writes the same bytes, which a test checks against the shipped files.

Items are completion-style prompts (like the hand-written ones, so small base models can
answer them), each with the scorer that judges it and a sample `answer` the scorer accepts.
PURE except `write_all`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from profiler.evals.accuracy import EvalItem

FOLDER = Path(__file__).parents[1] / "evalsets"
CATEGORIES = ("chat", "extraction", "code", "math", "reasoning")
GENERATED = 100
HOLDOUT = 40
SEED = 12

_CAPITALS = (
    ("Spain", "Madrid"), ("Portugal", "Lisbon"), ("Greece", "Athens"), ("Egypt", "Cairo"),
    ("Kenya", "Nairobi"), ("Peru", "Lima"), ("Chile", "Santiago"), ("Norway", "Oslo"),
    ("Sweden", "Stockholm"), ("Finland", "Helsinki"), ("Poland", "Warsaw"), ("Austria", "Vienna"),
    ("Hungary", "Budapest"), ("Ireland", "Dublin"), ("Cuba", "Havana"), ("Thailand", "Bangkok"),
    ("Vietnam", "Hanoi"), ("Russia", "Moscow"), ("China", "Beijing"), ("India", "New Delhi"),
    ("Argentina", "Buenos Aires"), ("Mexico", "Mexico City"), ("Turkey", "Ankara"),
    ("Denmark", "Copenhagen"), ("Belgium", "Brussels"), ("Iran", "Tehran"), ("Iraq", "Baghdad"),
)  # fmt: skip
_OPPOSITES = (
    ("hot", "cold"), ("up", "down"), ("big", "small"), ("fast", "slow"), ("day", "night"),
    ("happy", "sad"), ("open", "closed"), ("early", "late"), ("light", "dark"), ("wet", "dry"),
    ("rich", "poor"), ("strong", "weak"), ("full", "empty"), ("young", "old"), ("win", "lose"),
)  # fmt: skip
_NAMES = (
    "Alice", "Bob", "Carol", "Dan", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy",
    "Mallory", "Niaj", "Olivia", "Peggy", "Rupert", "Sybil", "Trent", "Victor", "Wendy",
)  # fmt: skip
_CITIES = (
    "Berlin", "Paris", "Madrid", "Rome", "Vienna", "Prague", "Oslo", "Lisbon", "Dublin",
    "Warsaw", "Zurich", "Athens", "Tokyo", "Seoul", "Toronto", "Chicago", "Denver",
)  # fmt: skip
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")  # fmt: skip
_KINDS = (("cats", "cat", "animals", "animal"), ("roses", "rose", "flowers", "flower"),
          ("oaks", "oak", "trees", "tree"), ("sparrows", "sparrow", "birds", "bird"),
          ("salmon", "salmon", "fish", "fish"), ("cars", "car", "vehicles", "vehicle"),
          ("violins", "violin", "instruments", "instrument"))  # fmt: skip
_PLURALS = (
    ("child", "children"), ("mouse", "mice"), ("foot", "feet"), ("tooth", "teeth"),
    ("goose", "geese"), ("man", "men"), ("woman", "women"), ("person", "people"),
    ("leaf", "leaves"), ("knife", "knives"), ("wolf", "wolves"), ("city", "cities"),
    ("box", "boxes"), ("bus", "buses"), ("baby", "babies"), ("story", "stories"),
)  # fmt: skip
_COLORS = (
    ("banana", "yellow"), ("ripe tomato", "red"), ("lemon", "yellow"), ("lime", "green"),
    ("crow", "black"), ("polar bear", "white"), ("carrot", "orange"), ("plum", "purple"),
    ("fresh snow", "white"), ("blade of grass", "green"), ("lump of coal", "black"),
)  # fmt: skip
_WORDS = ("apple", "river", "stone", "cloud", "tiger", "piano", "lemon", "candle", "garden")

Item = dict[str, Any]
Maker = Callable[[random.Random], Item]


def _chat(rng: random.Random) -> Item:
    kind = rng.randrange(7)
    if kind == 4:
        word, plural = rng.choice(_PLURALS)
        return {"prompt": f"The plural of {word} is", "expected": plural}
    if kind == 5:
        thing, color = rng.choice(_COLORS)
        return {"prompt": f"Q: What color is a {thing}?\nA: It is", "expected": color}
    if kind == 6:
        n = rng.randrange(10, 999)
        return {"prompt": f"Q: Which number comes right after {n}?\nA:", "expected": n + 1,
                "scorer": "numeric", "answer": f" {n + 1}"}  # fmt: skip
    if kind == 0:
        country, capital = rng.choice(_CAPITALS)
        return {"prompt": f"The capital of {country} is", "expected": capital}
    if kind == 1:
        word, other = rng.choice(_OPPOSITES)
        return {"prompt": f"The opposite of {word} is", "expected": other}
    if kind == 2:
        i = rng.randrange(7)
        return {"prompt": f"The day after {_DAYS[i]} is", "expected": _DAYS[(i + 1) % 7]}
    i = rng.randrange(12)
    return {"prompt": f"The month after {_MONTHS[i]} is", "expected": _MONTHS[(i + 1) % 12]}


def _extraction(rng: random.Random) -> Item:
    name = rng.choice(_NAMES)
    if rng.random() < 0.5:
        age = rng.randrange(18, 95)
        text = f'Text: {name} is {age} years old.\nJSON: {{"name": "{name}", "age":'
        return {"prompt": text, "expected": age, "scorer": "numeric", "answer": f" {age}}}"}
    city, year = rng.choice(_CITIES), rng.randrange(1990, 2025)
    text = f'Text: {name} moved to {city} in {year}.\nJSON: {{"person": "{name}", "city": "'
    return {"prompt": text, "expected": city}


def _code(rng: random.Random) -> Item:
    kind = rng.randrange(3)
    if kind == 0:
        a, b = rng.randrange(2, 60), rng.randrange(2, 60)
        prompt = f">>> print({a} + {b})\n"
        return {"prompt": prompt, "expected": a + b, "scorer": "numeric", "answer": str(a + b)}
    if kind == 1:
        xs = [rng.randrange(1, 20) for _ in range(rng.randrange(2, 7))]
        prompt = f">>> len({xs})\n"
        return {"prompt": prompt, "expected": len(xs), "scorer": "numeric", "answer": str(len(xs))}
    word = rng.choice(_WORDS)
    return {"prompt": f">>> '{word}'.upper()\n", "expected": word.upper(), "scorer": "contains"}


def _math(rng: random.Random) -> Item:
    a, b = rng.randrange(2, 100), rng.randrange(2, 100)
    op = rng.choice(("+", "-", "*"))
    value = a + b if op == "+" else a - b if op == "-" else a * b
    return {"prompt": f"{a} {op} {b} =", "expected": value, "scorer": "numeric",
            "answer": f" {value}"}  # fmt: skip


def _reasoning(rng: random.Random) -> Item:
    kind = rng.randrange(3)
    if kind == 0:
        start, step = rng.randrange(1, 30), rng.randrange(2, 9)
        seq = ", ".join(str(start + step * k) for k in range(4))
        nxt = start + step * 4
        return {"prompt": f"{seq},", "expected": nxt, "scorer": "numeric", "answer": f" {nxt}"}
    if kind == 1:
        plural, single, group, member = rng.choice(_KINDS)
        name = rng.choice(_NAMES)
        prompt = f"If all {plural} are {group} and {name} is a {single}, then {name} is a"
        return {"prompt": prompt, "expected": member}
    a, b, c = rng.sample(_NAMES, 3)
    prompt = f"{a} is taller than {b}, and {b} is taller than {c}. The tallest of the three is"
    return {"prompt": prompt, "expected": a}


MAKERS: dict[str, Maker] = {
    "chat": _chat,
    "extraction": _extraction,
    "code": _code,
    "math": _math,
    "reasoning": _reasoning,
}


def _complete(category: str, raw: Item, ident: str) -> Item:
    scorer = raw.get("scorer", "contains")
    item = {"id": ident, "prompt": raw["prompt"], "expected": raw["expected"],
            "scorer": scorer, "category": category, "max_tokens": 8}  # fmt: skip
    item["answer"] = raw.get("answer", f" {raw['expected']}")
    EvalItem.model_validate(item)  # the sample answer must pass its scorer
    return item


def _unique(category: str, rng: random.Random, taken: set[str]) -> Iterator[Item]:
    """Items of `category` whose prompts are not in `taken` (which grows as they come)."""
    maker = MAKERS[category]
    for _ in range(100_000):
        raw = maker(rng)
        if raw["prompt"] not in taken:
            taken.add(raw["prompt"])
            yield raw
    raise RuntimeError(f"{category}: the generator ran out of distinct prompts")


def generate(category: str, taken: set[str], seed: int = SEED) -> tuple[list[Item], list[Item]]:
    """(generated, held-out) items of `category`, none with a prompt in `taken`."""
    rng = random.Random(f"{seed}:{category}")
    source = _unique(category, rng, taken)
    generated = [
        _complete(category, next(source), f"{category}-g{i:03d}") for i in range(GENERATED)
    ]
    holdout = [_complete(category, next(source), f"{category}-h{i:03d}") for i in range(HOLDOUT)]
    return generated, holdout


def render(items: list[Item]) -> str:
    return "".join(json.dumps(item) + "\n" for item in items)


def expected_files(folder: Path = FOLDER) -> dict[Path, str]:
    """path -> the text the generator writes there (hand-written prompts are never reused)."""
    out: dict[Path, str] = {}
    for category in CATEGORIES:
        hand = folder / f"{category}.jsonl"
        taken = {
            json.loads(line).get("prompt", "")
            for line in hand.read_text(encoding="utf-8").splitlines()
            if line.strip()
        }
        generated, holdout = generate(category, taken)
        out[folder / f"{category}-generated.jsonl"] = render(generated)
        out[folder / "holdout" / f"{category}.jsonl"] = render(holdout)
    return out


def write_all(folder: Path = FOLDER) -> list[Path]:
    written = []
    for path, text in expected_files(folder).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def holdout_sets(folder: Path = FOLDER) -> tuple[Path, ...]:
    """The held-out files (for reporting accuracy on items no profile saw)."""
    return tuple(sorted((folder / "holdout").glob("*.jsonl")))


if __name__ == "__main__":
    for written in write_all():
        print(written)
