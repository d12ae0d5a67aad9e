"""The settings of a run that shape its training, recorded in every checkpoint it saves, so that a resume can say how
the run that wrote its checkpoint differed."""

import json
import logging
import os
import re
from dataclasses import asdict
from pathlib import Path

from transformers import TrainerCallback, TrainingArguments

logger = logging.getLogger(__name__)

# Settings that may change when a run is resumed without changing what it trains: where and how often it reports,
# saves and evaluates, and how long it goes on.
BOOKKEEPING = re.compile(
    r"eval|predict|test|log|hub|report|save|^do_|output_dir|resume|run_name|max_steps|epochs|^token$|cache"
)


class RunSettings(TrainerCallback):
    """Every argument of a run but bookkeeping, written into every checkpoint it saves (`run_settings.json`)."""

    def __init__(self, *arguments):
        values = {}
        for args in arguments:
            values |= args.to_dict() if isinstance(args, TrainingArguments) else asdict(args)
        settings = {key: value for key, value in values.items() if not BOOKKEEPING.search(key)}
        self.settings = json.loads(json.dumps(settings, default=str))

    def on_save(self, args, state, control, **kwargs):
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and checkpoint.is_dir():
            write_atomically(checkpoint / "run_settings.json", json.dumps(self.settings, indent=1, sort_keys=True))

    def compare(self, checkpoint: str) -> None:
        """Log each setting in which the run that wrote `checkpoint` differs from this one."""
        path = Path(checkpoint) / "run_settings.json"
        if not path.is_file():
            logger.warning(f"{checkpoint} does not say which settings wrote it (run_settings.json); not compared.")
            return
        saved, now = json.loads(path.read_text()), self.settings
        keys = [key for key in sorted(saved | now) if saved.get(key) != now.get(key)]
        if changed := "; ".join(f"{key} {saved.get(key)!r} (this run: {now.get(key)!r})" for key in keys):
            logger.warning(
                f"{checkpoint} was written by a run with other settings: {changed}. The optimizer and learning-rate schedule continue from the checkpoint's."
            )


def write_atomically(path: Path, text: str) -> None:
    """`path` with `text`, written under a temporary name and then renamed: a run killed meanwhile leaves no file cut
    short (a resume would read it), only the temporary one."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
