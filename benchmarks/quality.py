"""Small-scale reproduction of the paper's quality claims, sized for a 2-core CPU, with the project's scripts.

    python benchmarks/quality.py                                  # all suites, 1 seed
    python benchmarks/quality.py --suites mlm --seeds 0 1 2        # Table 4 claim, three seeds
    python benchmarks/quality.py --suites sgu --max_steps 300      # Table 3 ordering
    python benchmarks/quality.py --suites lr --models gmlp bert    # each model at 3e-4, 1e-3, 3e-3 (first seed)
    python benchmarks/quality.py --suites finetune --tasks sst2 mnli squad

Data (../shared/data, never copied into the repo): MLM pretraining on WikiText-2's *test* split and validation
perplexity on its *valid* split (the train split is not on this machine); fine-tuning on GLUE SST-2 (and MNLI
matched/mismatched and SQuAD v1.1 when their files are present; otherwise that task is reported as skipped).

- `mlm`: gMLP, aMLP and BERT at (nearly) equal parameter count and equal steps: validation perplexity side by side
  (the paper's Table 4: gMLP trails the Transformer at 60M parameters and matches it from 100M up; Table 6: aMLP
  below both).
- `sgu`: the four SGU variants of Table 3 at equal steps (paper: split < multiplicative < additive < linear).
- `finetune`: each `mlm` checkpoint fine-tuned with run_glue.py / run_squad.py (with its pretraining seed).
- `lr`: the `mlm` models at each of --sweep_learning_rates, so that no model is judged at a learning rate that suits
  only the others.

Every run is a subprocess of run_mlm.py / run_glue.py / run_squad.py; results go to benchmarks/results/quality.json
and .md, the perplexity curves to benchmarks/results/quality_curves.png (named after --output). A finished run is
reused by any later invocation with the same settings (the work dir keeps them), so adding seeds or suites costs only
the new runs.
"""

import argparse
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

from transformers import BertConfig, BertForMaskedLM


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from gmlp import GMLPConfig, GMLPForMaskedLM  # noqa: E402


RESULTS_DIR = Path(__file__).resolve().parent / "results"
DEFAULT_DATA = ROOT.parent / "shared" / "data"
# gmlp-tiny: 8 blocks, d_model 128, d_ffn 768, n 128, an 8,192-token WordPiece vocabulary trained on the data.
GMLP_TINY = dict(vocab_size=8192, hidden_size=128, intermediate_size=768, num_hidden_layers=8, max_position_embeddings=128)
SGU_VARIANTS = ("multiplicative_split", "multiplicative", "additive", "linear")
GLUE_TASK_DIRS = {"sst2": "SST-2", "mnli": "MNLI"}


def parameters(model) -> int:
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def model_configs() -> dict:
    """name -> config, at nearly equal parameter count. aMLP drops one block to pay for its tiny attention (as the
    paper's aMLP-base has 36 blocks against gMLP-base's 48); BERT has gMLP's width and depth and the FFN width that
    matches the count."""
    gmlp = GMLPConfig(**GMLP_TINY)
    amlp = GMLPConfig(**{**GMLP_TINY, "num_hidden_layers": 7, "tiny_attention_size": 32})
    target = parameters(GMLPForMaskedLM(gmlp))

    def bert(intermediate_size):
        return BertConfig(
            vocab_size=GMLP_TINY["vocab_size"], hidden_size=128, num_hidden_layers=8, num_attention_heads=2,
            intermediate_size=intermediate_size, max_position_embeddings=128,
        )

    low, high = (parameters(BertForMaskedLM(bert(size))) for size in (128, 256))
    return {"gmlp": gmlp, "amlp": amlp, "bert": bert(round(128 + (target - low) * 128 / (high - low)))}


def run(command: list[str], log: Path) -> None:
    """Run one training script, its output to `log`; raise with the log's tail if it fails."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    print("  $ " + " ".join(command), file=sys.stderr, flush=True)
    with log.open("w") as handle:
        result = subprocess.run(command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, env=env)
    if result.returncode:
        raise RuntimeError(f"{command[1]} failed; see {log}:\n" + log.read_text()[-3000:])


def train_tokenizer(args) -> Path:
    output = args.work_dir / "tokenizer"
    if not (output / "tokenizer_config.json").exists():
        run([sys.executable, "-m", "gmlp.tokenization_gmlp", "--train_files", str(args.data / "wikitext-2" / "test.txt"),
             "--output_dir", str(output), "--vocab_size", str(GMLP_TINY["vocab_size"]), "--model_max_length", "128"],
            args.work_dir / "logs" / "tokenizer.log")
    return output


def settings_key(settings: list) -> str:
    """A short hash of the settings that decide a run's result, part of its folder name, so that a finished run is
    reused by a later invocation (more seeds, another suite) and never mistaken for a run with other settings."""
    return hashlib.sha1(json.dumps(settings, default=str).encode()).hexdigest()[:10]


def run_key(config, args, learning_rate: float) -> str:
    """The settings key of a pretraining run, but for the seed (which its folder name carries)."""
    return settings_key([config.to_json_string(use_diff=False), args.max_steps, args.batch_size, learning_rate,
                         args.max_eval_samples])


def pretrain(args, name: str, config, seed: int, tokenizer: Path, learning_rate: float | None = None) -> dict:
    """MLM pretraining with run_mlm.py (or the finished run with the same settings in the work dir): returns the
    final validation perplexity and the perplexity curve. The learning rate is --learning_rate unless given."""
    learning_rate = args.learning_rate if learning_rate is None else learning_rate
    key = run_key(config, args, learning_rate)
    for finished in args.work_dir.glob(f"mlm-*-{key}-seed{seed}/eval_results.json"):
        print(f"  reusing {finished.parent}", file=sys.stderr)
        return read_pretraining(finished.parent)
    output = args.work_dir / f"mlm-{name}-{key}-seed{seed}"
    config_dir = args.work_dir / "configs" / name
    config.save_pretrained(config_dir)
    data = args.data / "wikitext-2"
    run([
        sys.executable, "run_mlm.py", "--config_name", str(config_dir), "--tokenizer_name", str(tokenizer),
        "--train_file", str(data / "test.txt"), "--validation_file", str(data / "valid.txt"),
        "--max_seq_length", "128", "--do_train", "--do_eval", "--output_dir", str(output),
        "--max_steps", str(args.max_steps), "--per_device_train_batch_size", str(args.batch_size),
        "--per_device_eval_batch_size", "64", "--learning_rate", str(learning_rate),
        "--warmup_steps", str(max(1, args.max_steps // 10)), "--weight_decay", "0.01",
        "--eval_strategy", "steps", "--eval_steps", str(max(1, args.max_steps // 5)),
        "--max_eval_samples", str(args.max_eval_samples), "--logging_steps", str(max(1, args.max_steps // 20)),
        "--save_strategy", "no", "--report_to", "none", "--seed", str(seed), "--data_seed", "0",
    ], args.work_dir / "logs" / f"{output.name}.log")
    return read_pretraining(output)


def read_pretraining(output: Path) -> dict:
    metrics = json.loads((output / "eval_results.json").read_text())
    history = json.loads((output / "trainer_state.json").read_text())["log_history"]
    curve = [(entry["step"], math.exp(entry["eval_loss"])) for entry in history if "eval_loss" in entry]
    return {"checkpoint": str(output), "perplexity": metrics["perplexity"], "curve": curve}


def finetune(args, task: str, checkpoint: str, tag: str, seed: int) -> dict | None:
    """Fine-tune one checkpoint on a task (or reuse the finished run with the same settings); None if the task's data
    is not on this machine."""
    key = settings_key([checkpoint, args.finetune_steps, args.finetune_learning_rate, seed])
    output = args.work_dir / f"ft-{task}-{tag}-{key}"
    common = [
        "--model_name_or_path", checkpoint, "--do_train", "--do_eval", "--output_dir", str(output),
        "--max_steps", str(args.finetune_steps), "--per_device_train_batch_size", "32",
        "--learning_rate", str(args.finetune_learning_rate), "--warmup_steps", str(max(1, args.finetune_steps // 10)),
        "--max_seq_length", "128", "--save_strategy", "no", "--report_to", "none", "--seed", str(seed),
    ]
    if task in GLUE_TASK_DIRS:
        task_dir = args.data / "glue" / GLUE_TASK_DIRS[task]
        if not any((task_dir / f"train.{extension}").exists() for extension in ("tsv", "jsonl")):
            return None
        command = [sys.executable, "run_glue.py", "--task_name", task, "--glue_dir", str(args.data / "glue"), *common]
    elif task == "squad":
        squad = args.data / "squad"
        if not (squad / "train-v1.1.json").exists():
            return None
        command = [sys.executable, "run_squad.py", "--train_file", str(squad / "train-v1.1.json"),
                   "--validation_file", str(squad / "dev-v1.1.json"), *common]
    else:
        raise ValueError(f"Unknown fine-tuning task {task!r}; choose sst2, mnli or squad.")
    if (output / "eval_results.json").exists():
        print(f"  reusing {output}", file=sys.stderr)
    else:
        run(command, args.work_dir / "logs" / f"{output.name}.log")
    return json.loads((output / "eval_results.json").read_text())


def summary(values: list[float], digits: int = 2) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f} (n={len(values)})"


def markdown(results: dict) -> str:
    lines = [f"Steps: {results['max_steps']} x batch {results['batch_size']} x 128 tokens; seeds {results['seeds']}.", ""]
    if "mlm" in results:
        lines += ["### MLM pretraining, WikiText-2 (train: test split; validation perplexity: valid split)", "",
                  "| model | parameters | validation perplexity | paper: Table 4 smallest / Table 6 base |", "|---|---|---|---|"]
        paper = {"bert": "4.91 (67M) / 4.17 (110M)", "gmlp": "5.25 (59M) / 4.28 (130M)", "amlp": "- / 3.95 (109M)"}
        for name, row in results["mlm"].items():
            lines.append(f"| {name} | {row['parameters'] / 1e6:.2f}M | {summary(row['perplexities'])} | {paper[name]} |")
        lines.append("")
    if "sgu" in results:
        lines += ["### SGU variants (Table 3), equal steps", "",
                  "| variant | parameters | validation perplexity | paper (Table 3) |", "|---|---|---|---|"]
        paper = {"linear": "5.14", "additive": "4.97", "multiplicative": "4.53", "multiplicative_split": "4.35"}
        for name, row in results["sgu"].items():
            lines.append(f"| {name} | {row['parameters'] / 1e6:.2f}M | {summary(row['perplexities'])} | {paper[name]} |")
        lines.append("")
    if "lr" in results:
        rates = [float(rate) for rate in next(iter(results["lr"].values()))]
        lines += [f"### Learning rate (seed {results['seeds'][0]}): validation perplexity, best in bold", "",
                  "| model | " + " | ".join(f"lr {rate:g}" for rate in rates) + " |", "|---|" + "---|" * len(rates)]
        for name, by_rate in results["lr"].items():
            best = min(by_rate.values())
            cells = [f"**{value:.2f}**" if value == best else f"{value:.2f}" for value in by_rate.values()]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    if "finetune" in results:
        lines += ["### Fine-tuning the `mlm` checkpoints (each seed's checkpoint with that seed)", "",
                  "| task | model | metrics |", "|---|---|---|"]
        for task, rows in results["finetune"].items():
            for name, runs in rows.items():
                if None in runs:
                    shown = "skipped: data not in ../shared/data"
                else:
                    names = [k for k, v in runs[0].items() if k.startswith("eval_") and isinstance(v, float)
                             and not k.endswith(("runtime", "per_second", "samples", "loss"))]
                    shown = ", ".join(f"{k.removeprefix('eval_')} {summary([run[k] for run in runs], digits=4)}"
                                      for k in names)
                lines.append(f"| {task} | {name} | {shown} |")
        lines.append("")
    return "\n".join(lines)


def plot_curves(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    suites = [suite for suite in ("mlm", "sgu") if suite in results]
    figure, axes = plt.subplots(1, len(suites), figsize=(5.5 * len(suites), 4), squeeze=False)
    for axis, suite in zip(axes[0], suites):
        for name, row in results[suite].items():
            for seed, curve in enumerate(row["curves"]):
                steps, values = zip(*curve)
                axis.plot(steps, values, "o-", color=f"C{list(results[suite]).index(name)}", alpha=0.8,
                          label=name if seed == 0 else None)
        axis.set(yscale="log", xlabel="step", ylabel="validation perplexity", title=f"WikiText-2 MLM ({suite})")
        axis.legend()
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suites", nargs="+", default=["mlm", "sgu", "finetune"],
                        choices=["mlm", "sgu", "finetune", "lr"])
    parser.add_argument("--models", nargs="+", default=["gmlp", "amlp", "bert"], choices=["gmlp", "amlp", "bert"],
                        help="the models of the mlm suite (and so of finetune)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--max_steps", type=int, default=400, help="MLM pretraining steps per run")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--sweep_learning_rates", type=float, nargs="+", default=[3e-4, 1e-3, 3e-3],
                        help="the learning rates of the lr suite")
    parser.add_argument("--max_eval_samples", type=int, default=256, help="validation sequences of 128 tokens")
    parser.add_argument("--tasks", nargs="+", default=["sst2", "mnli", "squad"], help="fine-tuning tasks")
    parser.add_argument("--finetune_steps", type=int, default=300)
    parser.add_argument("--finetune_learning_rate", type=float, default=5e-4)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument("--work_dir", type=Path, default=Path("/tmp/gmlp-quality"), help="checkpoints and logs")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "quality.json")
    return parser.parse_args()


def main():
    args = parse_args()
    if not (args.data / "wikitext-2" / "test.txt").exists():
        raise SystemExit(f"WikiText-2 not found under {args.data}; pass --data pointing at the shared data folder.")
    tokenizer = train_tokenizer(args)
    results = {"max_steps": args.max_steps, "batch_size": args.batch_size, "seeds": args.seeds}
    suites = {"mlm": {name: config for name, config in model_configs().items() if name in args.models}}
    if "sgu" in args.suites:
        suites["sgu"] = {variant: GMLPConfig(**GMLP_TINY, sgu_variant=variant) for variant in SGU_VARIANTS}
    for suite in [s for s in ("mlm", "sgu") if s in args.suites or (s == "mlm" and "finetune" in args.suites)]:
        results[suite] = {}
        for name, config in suites[suite].items():
            model = BertForMaskedLM(config) if isinstance(config, BertConfig) else GMLPForMaskedLM(config)
            runs = [pretrain(args, name if suite == "mlm" else f"sgu-{name}", config, seed, tokenizer) for seed in args.seeds]
            results[suite][name] = {
                "parameters": parameters(model),
                "perplexities": [r["perplexity"] for r in runs],
                "curves": [r["curve"] for r in runs],
                "checkpoints": [r["checkpoint"] for r in runs],
            }
            print(f"{suite} {name}: perplexity {summary(results[suite][name]['perplexities'])}", file=sys.stderr)
    if "lr" in args.suites:
        results["lr"] = {
            name: {str(rate): pretrain(args, name, config, args.seeds[0], tokenizer, rate)["perplexity"]
                   for rate in args.sweep_learning_rates}
            for name, config in suites["mlm"].items()
        }
    if "finetune" in args.suites:
        # Each seed's pretrained checkpoint is fine-tuned with the same seed: the spread covers both stages.
        results["finetune"] = {
            task: {name: [finetune(args, task, checkpoint, f"{name}-seed{seed}", seed)
                          for seed, checkpoint in zip(args.seeds, row["checkpoints"])]
                   for name, row in results["mlm"].items()}
            for task in args.tasks
        }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1))
    if "mlm" in results or "sgu" in results:
        plot_curves(results, args.output.with_name(f"{args.output.stem}_curves.png"))
    report = markdown(results)
    args.output.with_suffix(".md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
