"""``llama-car probe``: the counterfactual title-framing probe (paper §4.4, Tables 2–3)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from llama_index_car.cli._args import (
    add_cache_and_progress_options,
    add_embed_option,
    existing_path,
    int_at_least,
    output_dir,
    show_progress,
    subcommand,
)

EXAMPLE = """\
examples:
  llama-car probe ../shared/corpus/hwpx --out out/probe-hwpx
  llama-car probe sections.jsonl --embed openai --max-sections 80 --seed 0 --out out/probe

CORPUS is a folder of .hwp, .hwpx and .hml files (heading sections via the reader of each
suffix + HWPXNodeParser) or a JSONL file of {"title": ..., "body": ...}. Outputs DIR/probe.json, DIR/probe.md (Table 3 contrasts,
rank displacement), DIR/probe.png (orig / cfb / cfs / cf).
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``probe`` on the ``llama-car`` subparsers."""
    p = subcommand(
        subparsers, "probe",
        help="counterfactual title-framing probe (orig/cf/cfp/cfn/cfb/cfs, Table 3)",
        description="Measure how a section's title framing shifts dense similarity: for "
        "plan-framed sections whose body states a ~기준 criterion, compare cos(query, "
        "variant) over six rule-built variants of the same body.",
        epilog=EXAMPLE,
    )
    p.add_argument("corpus", metavar="CORPUS", type=existing_path, help="folder of .hwp/.hwpx/.hml files, or JSONL of {title, body}")
    p.add_argument("--out", required=True, metavar="DIR", type=output_dir,
                   help="output folder")
    add_embed_option(p)
    p.add_argument("--max-sections", type=int_at_least(2), default=None, metavar="N",
                   help="probe a seeded random sample of N eligible sections (paper: 80)")
    p.add_argument("--frames", default="plan", metavar="LIST",
                   help="eligible title frames, comma-separated from plan,mixed,standard,neither "
                   "(default: %(default)s, the paper's rule; with non-plan frames cf = cfp = cfn)")
    p.add_argument("--heads", default="기준", metavar="LIST",
                   help="criterion head nouns, comma-separated (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0,
                   help="sampling and bootstrap seed (default: %(default)s)")
    add_cache_and_progress_options(p)
    return p


def run(args: argparse.Namespace) -> int:
    """Execute ``llama-car probe``; returns the exit code."""
    from llama_index_car._errors import ConfigurationError
    from llama_index_car.evaluation.probe import (
        eligible_cases,
        load_sections,
        run_probe,
        sample_cases,
        write_probe_outputs,
    )
    from llama_index_car.providers import resolve_embed_model

    if args.max_sections is not None and args.max_sections < 2:
        raise ConfigurationError(f"--max-sections {args.max_sections} must be >= 2")
    sections = load_sections(args.corpus)
    frames = [f.strip() for f in str(args.frames).split(",") if f.strip()]
    heads = [h.strip() for h in str(args.heads).split(",") if h.strip()]
    cases, counts = eligible_cases(sections, frames=frames, heads=heads)
    chosen = sample_cases(cases, args.max_sections, seed=args.seed)
    print(
        f"{counts['sections']} sections: plan {counts['plan']}, standard {counts['standard']}, "
        f"mixed {counts['mixed']}, neither {counts['neither']}; eligible {counts['eligible']}; "
        f"probing {len(chosen)}",
        file=sys.stderr,
    )
    if len(chosen) < 2:
        raise ConfigurationError(
            f"{args.corpus}: only {len(chosen)} eligible section(s) with title frames "
            f"{','.join(frames)}; the probe needs >= 2 sections whose body states a "
            f"criterion compound ({','.join(heads)}) absent from the title "
            "(widen with --frames plan,mixed,standard,neither)"
        )
    embed_model = resolve_embed_model(args.embed)
    result = run_probe(
        chosen, embed_model, corpus=sections, cache_dir=args.cache_dir, seed=args.seed,
        counts=counts, frames=frames, show_progress=show_progress(args),
    )
    written = write_probe_outputs(result, args.out)
    d = result.to_dict()
    print(f"{'contrast':<14} {'Δcos':>8} {'cases':>9} {'p':>9} {'Holm p':>9} {'d_z':>6}")
    for r in d["contrasts"]:
        dz = "–" if r["d_z"] is None else f"{r['d_z']:.2f}"
        print(f"{r['a'] + ' − ' + r['b']:<14} {r['delta']:>+8.4f} {r['n_better']:>4}/{r['n']:<4} "
              f"{r['p']:>9.2g} {r['p_holm']:>9.2g} {dz:>6}")
    disp = d["displacement"]
    print(f"rank orig → cf: mean {disp['mean_rank_orig']:.1f} → {disp['mean_rank_cf']:.1f}, "
          f"median {disp['median_rank_orig']:.1f} → {disp['median_rank_cf']:.1f} "
          f"(corpus {disp['corpus_size']})")
    print(f"wrote {len(written)} files to {args.out}", file=sys.stderr)
    return 0
