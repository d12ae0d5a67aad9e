"""The scripts' one error path for users: a `ScriptError`, printed by `main` as one `error: ...` line with exit code 2;
any other exception is a bug and keeps its traceback."""

import sys
from collections.abc import Callable, Iterable


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

    return main


def first_few(items: Iterable, count: int = 3, separator: str = ", ") -> str:
    """The first `count` of `items` for a message, then "..." if there are more."""
    items = [str(item) for item in items]
    return separator.join(items[:count] + ["..."] * (len(items) > count))
