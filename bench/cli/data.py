"""Commands about data on disk: ``data tokenize``, ``data synth-imagefolder``, ``data synth-tokens``,
``perf loader``."""

from __future__ import annotations

import argparse

import pandas as pd

from bench.runs import perf
from bench.runs.tasks import TaskOptions
from bench.runs.tasks.synth import synth_imagefolder, synth_tokens
from bench.runs.tasks.tokenize import tokenize


def cmd_tokenize(ns: argparse.Namespace) -> int:
    meta = tokenize(ns.inputs, ns.out, ns.tokenizer, val_fraction=ns.val_fraction, fmt=ns.format,
                    shard_tokens=ns.shard_tokens, name=ns.name, progress=not ns.quiet)
    tok = meta["tokenizer"]
    print(f"{meta['input_files']} file(s), {meta['input_bytes']:,} bytes -> {meta['train_tokens']:,} train and "
          f"{meta['val_tokens']:,} val tokens ({tok['name']}, vocabulary {tok['vocab_size']:,}) in {ns.out} "
          f"({meta['format']}: {', '.join(meta['files']['train'][:2] + meta['files']['val'][:1])}"
          f"{', ...' if len(meta['files']['train']) > 2 else ''}). Train on them with: python -m bench run --task "
          f"tokens --data-path {ns.out} --vocab-size {tok['vocab_size']} ...")
    return 0


def cmd_synth_imagefolder(ns: argparse.Namespace) -> int:
    info = synth_imagefolder(ns.root, classes=ns.classes, train_per_class=ns.train_per_class,
                             val_per_class=ns.val_per_class, size=ns.size, fmt=ns.format,
                             shard_samples=ns.shard_samples, seed=ns.seed, jobs=ns.jobs, progress=not ns.quiet)
    print(f"{info['train']} train and {info['val']} val images of {info['classes']} classes ({info['format']}) in "
          f"{ns.root}; train on them with: python -m bench run --task imagefolder --data-path {ns.root} ...")
    return 0


def cmd_synth_tokens(ns: argparse.Namespace) -> int:
    meta = synth_tokens(ns.root, train_tokens=ns.train_tokens, val_tokens=ns.val_tokens, vocab_size=ns.vocab_size,
                        fmt=ns.format, shard_tokens=ns.shard_tokens, seed=ns.seed, progress=not ns.quiet)
    print(f"{meta['train_tokens']:,} train and {meta['val_tokens']:,} val tokens ({meta['format']}) in {ns.root}; "
          f"train on them with: python -m bench run --task tokens --data-path {ns.root} --vocab-size {ns.vocab_size}")
    return 0


def cmd_perf_loader(ns: argparse.Namespace) -> int:
    options = TaskOptions(data_path=ns.data_path, image_size=ns.image_size, seq_len=ns.seq_len,
                          subset_per_class=ns.subset_per_class, skip_bad_images=ns.skip_bad_images,
                          vocab_size=ns.vocab_size, prefetch=ns.prefetch)
    res = perf.loader(ns.task, options, ns.workers, batch_size=ns.batch_size, batches=ns.batches, device=ns.device,
                      seed=ns.seed)
    what = "images" if ns.task == "imagefolder" else "tokens"
    print(f"{ns.task} loader on {ns.data_path}, batch {ns.batch_size}, to {res['device']}: {what} per second with no "
          f"model, in steady state: timed once the first batch and the {ns.prefetch} batches per worker queued by then "
          f"are drained (first_batch_s, queue_s), over whole rounds of the workers, at least {ns.batches} batches and "
          f"{perf.MIN_ROUNDS} rounds (timed_batches)")
    table = pd.DataFrame(res["rows"]).rename(columns={f"{res['unit']}_per_s": f"{what}_per_s"})
    print(table.to_string(index=False, float_format=lambda v: f"{v:,.1f}"))
    return 0
