"""tinytext: a seeded stochastic grammar over a hand-written word list, with its exact entropy.

The corpus is English-like ASCII prose in paragraphs. Each paragraph follows one protagonist
(a name whose pronoun, she/he, must be remembered across sentences) through a handful of
sentences of four kinds: declaratives with subject–verb number agreement, a/an and optional
adjectives, adverbs and prepositional phrases; reported speech in quotes; arithmetic
("Seven plus two is nine.", the answer is determined); and counting ("counted from four to
seven: four, five, six, seven.", determined after its range). Word choice is Zipf-weighted.

Entropy floor. The generator adds ``-log2 p`` for every random choice it makes, so it knows
the information content of what it writes. All surface forms are distinct across word classes
(tested), which makes the derivation of a text unique and this sum its exact self-information;
divided by the byte count it is the entropy rate of the source in bits per character (~0.67
for the default corpus). No model can beat it in expectation; a model that sees a window that
starts mid-paragraph (not knowing the protagonist) sits slightly above it.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

DEFAULT_BYTES = 4_000_000  # ~4 MB, ~2.7 Mbit of information: more than a ~1M-parameter model can store
DEFAULT_SEED = 1234  # the corpus is a fixed dataset: every run of `tinytext` sees the same text


class Table:
    """Items with Zipf weights ``1/(rank+1)`` (or given ``weights``), sampled by one uniform draw."""

    def __init__(self, items: list[Any], weights: list[float] | None = None) -> None:
        w = weights if weights is not None else [1.0 / (i + 1) for i in range(len(items))]
        total = sum(w)
        self.items = items
        self.cum = [sum(w[: i + 1]) / total for i in range(len(w))]
        self.cost = [-math.log2(x / total) for x in w]  # bits of information of each outcome


class Source:
    """A seeded random source that keeps the running information content (bits) of its draws."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.bits = 0.0

    def pick(self, table: Table) -> Any:
        """One item of ``table``, charging its information content."""
        i = min(bisect.bisect_right(table.cum, self.rng.random()), len(table.items) - 1)
        self.bits += table.cost[i]
        return table.items[i]

    def chance(self, p: float) -> bool:
        hit = self.rng.random() < p
        self.bits -= math.log2(p if hit else 1.0 - p)
        return hit


@lru_cache(maxsize=1)
def word_classes() -> dict[str, list[list[str]]]:
    """Sections of ``tinytext_words.txt``: class name -> list of forms (one list per line)."""
    text = resources.files(__package__).joinpath("tinytext_words.txt").read_text(encoding="ascii")
    out: dict[str, list[list[str]]] = {}
    section = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            out[section] = []
        else:
            out[section].append(line.split())
    return out


FUNCTION_WORDS = ("the", "a", "an", "every", "some", "many", "she", "he", "said", "counted", "from", "to",
                  "plus", "minus", "is")


class Grammar:
    """The sentence and paragraph rules; every method appends text and charges ``src`` for its choices."""

    def __init__(self, src: Source) -> None:
        w = word_classes()
        self.src = src
        self.nouns = Table(w["nouns"])
        self.adjectives = Table([f[0] for f in w["adjectives"]])
        self.verbs = {"intransitive": Table(w["intransitive_verbs"]), "transitive": Table(w["transitive_verbs"])}
        self.adverbs = Table([f[0] for f in w["adverbs"]])
        self.preps = Table([f[0] for f in w["prepositions"]])
        self.heroes = Table([(n[0], "she") for n in w["female_names"]] + [(n[0], "he") for n in w["male_names"]])
        self.numbers = [f[0] for f in w["numbers"]]
        self.small = Table(list(range(11)), [1.0] * 11)
        self.number_of = Table([0, 1], [0.6, 0.4])  # 0 singular, 1 plural
        self.dets = (Table(["the", "a", "every"], [0.5, 0.35, 0.15]), Table(["the", "some", "many"], [0.55, 0.3, 0.15]))
        self.kinds = Table(["plain", "speech", "sum", "count"], [0.6, 0.15, 0.15, 0.1])
        self.subjects = Table(["name", "pronoun", "phrase"], [0.3, 0.3, 0.4])
        self.lengths = Table(list(range(1, 7)), [1.0] * 6)  # sentences after the opening one
        self.run_lengths = Table(list(range(2, 8)), [1.0] * 6)  # how many numbers a count spells out
        self.below = [Table(list(range(a + 1)), [1.0] * (a + 1)) for a in range(11)]  # minus: b <= a

    def noun_phrase(self) -> tuple[str, int]:
        number = self.src.pick(self.number_of)
        det = self.src.pick(self.dets[number])
        words = [self.src.pick(self.adjectives)] if self.src.chance(0.35) else []
        words.append(self.src.pick(self.nouns)[number])
        if det == "a" and words[0][0] in "aeiou":
            det = "an"  # determined by the next word: free of charge
        return " ".join([det, *words]), number

    def predicate(self, number: int) -> str:
        if self.src.chance(0.5):
            out = f"{self.src.pick(self.verbs['transitive'])[1 - number]} {self.noun_phrase()[0]}"
        else:
            out = self.src.pick(self.verbs["intransitive"])[1 - number]
            if self.src.chance(0.3):
                out += " " + self.src.pick(self.adverbs)
        if self.src.chance(0.4):
            out += f" {self.src.pick(self.preps)} {self.noun_phrase()[0]}"
        return out

    def clause(self, hero: tuple[str, str], subject: str) -> str:
        if subject == "phrase":
            phrase, number = self.noun_phrase()
            return f"{phrase} {self.predicate(number)}"
        return f"{hero[0] if subject == 'name' else hero[1]} {self.predicate(0)}"

    def sentence(self, hero: tuple[str, str], kind: str) -> str:
        if kind == "plain":
            return self.clause(hero, self.src.pick(self.subjects))
        who = hero[0] if self.src.chance(0.5) else hero[1]
        if kind == "speech":
            return f'{who} said, "{_cap(self.clause(hero, "phrase"))}."'
        a = self.src.pick(self.small)
        if kind == "count":
            run = self.numbers[a : a + self.src.pick(self.run_lengths)]
            return f"{who} counted from {run[0]} to {run[-1]}: {', '.join(run)}"
        if self.src.chance(0.5):
            b = self.src.pick(self.small)
            return f"{self.numbers[a]} plus {self.numbers[b]} is {self.numbers[a + b]}"
        b = self.src.pick(self.below[a])
        return f"{self.numbers[a]} minus {self.numbers[b]} is {self.numbers[a - b]}"

    def paragraph(self) -> str:
        hero = self.src.pick(self.heroes)
        parts = [_cap(self.clause(hero, "name")) + "."]  # the opening sentence introduces the protagonist
        for _ in range(self.src.pick(self.lengths)):
            s = _cap(self.sentence(hero, self.src.pick(self.kinds)))
            parts.append(s if s.endswith('"') else s + ".")
        return " ".join(parts) + "\n"


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


@dataclass(frozen=True)
class Corpus:
    """The generated text and its self-information ``bits`` under the generating process."""

    text: str
    bits: float

    @property
    def entropy_bpc(self) -> float:
        """Bits per character (= per byte: the text is ASCII) of the source: the floor of any model's loss."""
        return self.bits / len(self.text)


@lru_cache(maxsize=2)
def generate(n_bytes: int = DEFAULT_BYTES, seed: int = DEFAULT_SEED) -> Corpus:
    """Whole paragraphs until at least ``n_bytes`` characters; deterministic in ``seed``; cached in memory."""
    src = Source(seed)
    grammar = Grammar(src)
    parts: list[str] = []
    size = 0
    while size < n_bytes:
        parts.append(grammar.paragraph())
        size += len(parts[-1])
    return Corpus("".join(parts), src.bits)
