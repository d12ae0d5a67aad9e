"""The scripts' one error path for users: a `ScriptError` for every user mistake, printed by the script's `main` as one
`error: ...` line on stderr with exit code 2, as argparse does, without a traceback. Any other exception is a bug (ours
or a library's) and keeps its traceback. Under several processes each process that meets the mistake prints its line:
a check that fails on one node only (its own disk) is seen too."""

import sys
from collections.abc import Callable


class ScriptError(ValueError):
    """A user's mistake (an option, a file, a folder, the disk): its message names the problem and the fix."""


def script_main(run: Callable[[list[str]], object]) -> Callable[[list[str] | None], None]:
    """A script's command-line entry: `run` on `argv` (by default the command line's arguments), a `ScriptError`
    ending it with its message as one `error: ...` line on stderr and exit code 2."""

    def main(argv: list[str] | None = None) -> None:
        try:
            run(sys.argv[1:] if argv is None else argv)
        except ScriptError as error:
            print(f"error: {' '.join(str(error).splitlines())}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None

    return main
