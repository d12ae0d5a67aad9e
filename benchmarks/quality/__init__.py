"""Small-scale reproduction of the paper's quality claims, sized for a 2-core CPU, with the project's own scripts.

gMLP, aMLP and BERT (`transformers`' BertForMaskedLM) at equal parameter count (2.27M-2.30M), one tokenizer, the
same data, each pretrained with masked language modelling by run_mlm.py under the recipe its own search chose, then
fine-tuned by run_glue.py / run_squad.py:

    python -m benchmarks.quality                    # every part but step_time, seeds 0 1 2 (see docs/quality.md
                                                    #   for the time it takes); `python benchmarks/quality` too
    python -m benchmarks.quality --parts step_time  # seconds per step of each model: alone, on a quiet machine
    python -m benchmarks.quality --report_only      # the tables from the records, starting nothing

The parts (each runnable alone with --parts; a part also makes the runs it builds on):
- reference: the unigram floor on the masked positions of the evaluations (`pretrain_reference` in quality.json);
- step_time: seconds per training step and per evaluation, the models side by side in one process;
- search: per model, the same recipe search on seed 0 (rates, warm-up, constant rate or linear decay);
- pretrain: each model's chosen recipe at every seed; tables at equal steps and at equal training time;
- long: each model's chosen rate and warm-up at a constant rate for --long_steps (first seed): where the curves
  flatten for a reason other than the schedule;
- finetune: the SST-2 rate sweep, SST-2 / MNLI-m (dev split) / SQuAD v1.1 (dev split) at every seed, BERT's recipe
  probes;
- sgu: the SGU variants of the paper's Table 3 (gMLP's recipe, --sgu_steps), the split one also at equal size.

Data (`../shared/data`, never copied into the repository): WikiText-2 train for pretraining and the tokenizer,
valid (1,024 sequences, one seeded evaluation mask: run_mlm.py --eval_mask_seed 0) for every choice, test for the
last checkpoint's figure only; SST-2's train and dev sets; "MNLI-m (dev split)": only MNLI's dev-matched set is here,
shuffled once with random.Random(0) into 7,815 pairs to fine-tune on and 2,000 held out; "SQuAD v1.1 (dev split)":
only SQuAD's dev set is here, split by article (random.Random(0)): 38 articles to fine-tune on, 10 held out.

Every finished run writes its record to benchmarks/results/quality_runs/ at once; a later invocation reuses every
record with the same settings, so a stopped run loses nothing (checkpoints and logs live in --work_dir).
"""
