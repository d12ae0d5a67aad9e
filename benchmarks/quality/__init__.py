"""Small-scale test of the paper's quality claims, sized for a 2-core CPU, with the project's own scripts: gMLP, aMLP,
BERT and ModernBERT at 2.3M parameters, one tokenizer and the same data, each pretrained by run_mlm.py under the
recipe its own search chose, then fine-tuned by run_glue.py / run_squad.py (docs/quality.md: the set-up and results).

    python -m benchmarks.quality                    # every part but step_time (`python benchmarks/quality` too)
    python -m benchmarks.quality --parts step_time  # seconds per step of each model: alone, on a quiet machine
    python -m benchmarks.quality --report_only      # the tables from the records, starting nothing

The parts, run in this order (each runnable alone with --parts; a part also makes the runs it builds on):
- reference: the unigram floor on the masked positions of the evaluations (`pretrain_reference` in quality.json);
- step_time: seconds per training step and per evaluation, the models side by side in one process;
- search: per model, the same recipe search on seed 0 (rates, warm-up, constant rate or linear decay);
- pretrain: each model's chosen recipe at every seed; tables at equal steps and at equal training time;
- long: each model's chosen rate and warm-up at a constant rate for --long_steps (first seed);
- finetune: the SST-2 rate sweep, SST-2 / MNLI-m (dev split) / SQuAD v1.1 (dev split) at every seed, recipe probes;
- sgu: the rows of the paper's Table 3 (--sgu_steps): the SGU variants, the split one also at equal size, and the
  Transformers.

Every finished run writes its record to benchmarks/results/quality_runs/ at once; a later invocation reuses every
record with the same settings, so a stopped run loses nothing (checkpoints and logs live in --work_dir).
"""
