"""The settings that shape a run's training, recorded in each checkpoint so that a resume can say what differs."""

import json
import logging
import os
import re
from dataclasses import asdict
from pathlib import Path

from transformers import TrainerCallback, TrainingArguments

logger = logging.getLogger(__name__)

# Settings a resume may change without changing what it trains.
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
            # Written under a temporary name, then renamed: a run killed meanwhile leaves no file cut short.
            partial = checkpoint / ".run_settings.json.partial"
            partial.write_text(json.dumps(self.settings, indent=1, sort_keys=True), encoding="utf-8")
            os.replace(partial, checkpoint / "run_settings.json")

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
