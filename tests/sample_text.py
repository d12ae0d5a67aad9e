"""The words the script tests write their small corpora from (tokenizers and tiny models train on them)."""

WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "red",
    "mat",
    "while",
    "an",
    "old",
    "dog",
    "slept",
    "by",
    "the",
    "warm",
    "fire",
    "and",
    "the",
    "king",
    "sang",
    "to",
    "his",
    "sister",
]


def rotated_lines(count: int) -> list[str]:
    """`count` lines, each the words rotated by its index (modulo 20), so that every line differs."""
    return [" ".join(WORDS[i % 20 :] + WORDS[: i % 20]) for i in range(count)]
