"""The one error path for users, of the scripts and of every command line of the package (the tokenizer trainer, the
converter, the pictures, the benchmarks): a `ScriptError`, printed by `main` as one `error: ...` line with exit code
2; any other exception is a bug and keeps its traceback. It imports only the standard library, so that the model
library's command lines use it without the scripts' dependencies."""

import argparse
import gc
import math
import operator
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass


class ScriptError(ValueError):
    """A user's mistake (an option, a file, a folder, the disk): its message names the problem and the fix."""


def script_main(run: Callable[[list[str]], object]) -> Callable[[list[str] | None], None]:
    """A script's command-line entry: `run` on `argv` (default: the command line), a `ScriptError` as one line."""

    def main(argv: list[str] | None = None) -> None:
        try:
            run(sys.argv[1:] if argv is None else argv)
        except ScriptError as error:
            print(f"error: {' '.join(str(error).splitlines())}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None
        end_processes()

    return main


def end_processes() -> None:
    """After a run of several processes, its process group destroyed while Python still runs. The Trainer's reference
    cycles keep the model's DDP wrapper, and with it the group, until the interpreter exits; a gloo thread that frees
    the last collective's tensors then finds Python finalising and aborts the process ("terminate called without an
    active exception", at random, after the run's work is done). Collected first, the group's destruction waits for
    its threads."""
    distributed = sys.modules.get("torch.distributed")  # loaded by every run that has a group: none imported here
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        gc.collect()
        distributed.destroy_process_group()


class ParserErrors:
    """Mixed into an argparse parser: its complaints (a value of the wrong type, a missing option, a choice that is
    not one) are `ScriptError`s, one line as every other error, rather than argparse's usage and message."""

    def error(self, message: str):
        message = message.removeprefix("argument ")
        raise ScriptError(f"{message[:1].upper()}{message[1:]}. `--help` lists the options.")


class ArgumentParser(ParserErrors, argparse.ArgumentParser):
    """argparse's parser, its errors `ScriptError`s."""


@dataclass(frozen=True)
class Range:
    """The values a numeric option takes: finite numbers within the limits given, or `unset`'s value, which stands
    for "not set" (e.g. `(-1, "train for --num_train_epochs")` for `--max_steps`)."""

    above: float | None = None
    at_least: float | None = None
    below: float | None = None
    at_most: float | None = None
    unset: tuple[float, str] | None = None

    def holds(self, value: float) -> bool:
        if self.unset is not None and value == self.unset[0]:
            return True
        limits = ((self.above, operator.gt), (self.at_least, operator.ge), (self.below, operator.lt))
        limits += ((self.at_most, operator.le),)
        return math.isfinite(value) and all(limit is None or holds(value, limit) for limit, holds in limits)

    def __str__(self) -> str:
        words = (("above", self.above), ("at least", self.at_least), ("below", self.below), ("at most", self.at_most))
        text = " and ".join(f"{word} {limit}" for word, limit in words if limit is not None)
        return text + (f", or {self.unset[0]} ({self.unset[1]})" if self.unset else "")


def check_ranges(values, ranges: dict[str, Range]) -> None:
    """Each option of `ranges` (its flag: its range) that `values` (a namespace) holds within its range (each item of
    a list of them); one error naming every one that is not. An option it lacks or that is None (not given) passes."""
    wrong = []
    for flag, allowed in ranges.items():
        value = getattr(values, flag.lstrip("-").replace("-", "_"), None)
        for item in value if isinstance(value, list) else [] if value is None else [value]:
            finite = isinstance(item, (int, float)) and not isinstance(item, bool) and math.isfinite(item)
            if not (finite and allowed.holds(item)):
                wrong.append(f"{flag} {item!r}: must be {'' if finite else 'a finite number '}{allowed}".rstrip())
    if wrong:
        raise ScriptError("; ".join(wrong) + ".")


def first_few(items: Iterable, count: int = 3, separator: str = ", ") -> str:
    """The first `count` of `items` for a message, then "..." if there are more."""
    items = [str(item) for item in items]
    return separator.join(items[:count] + ["..."] * (len(items) > count))
