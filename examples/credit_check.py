"""Credit check on the bundled 2Wiki sample: do gold-evidence clusters earn higher utility?

Scores the rollouts with factutil, labels each cluster *gold* when one of its members is a gold
evidence triple of its question (any letter case or wording listed in ``2wiki_gold.json``) and
*distractor* otherwise, then prints the mean utility of each kind and two AUCs of utility for
separating them (1.0: every gold cluster above every distractor; 0.5: chance): *pooled* over all
clusters of the sample, and *within-group*, over the (gold, distractor) pairs of one question only —
the comparison a policy update makes, since utilities are relative to each group's success rate.
Each clustering mode runs under each prior (``FactUtilConfig.prior``). With ``--passages`` it
also scores the retrieved passages as the facts (``facts="retrieved"``, docs/method.md §9): a
passage is *gold* when its title is a supporting paragraph of its question (``supporting_facts``
of ``2wiki_dev_compositional30_evidences.jsonl``). Optionally saves a histogram of both utility
distributions.

    python examples/credit_check.py examples/data/2wiki_rollouts.jsonl [--modes exact,semantic]
        [--priors beta,group] [--passages] [--set key=value ...] [--plot FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import warnings
from pathlib import Path

from rich.console import Console
from rich.table import Table

from factutil import compute_process_advantages
from factutil.cli import load_config
from factutil.report import evidence_auc, gold_labels, load_gold, within_group_auc


def save_plot(results, path):
    """Histograms of cluster utilities, gold vs distractor, one panel per mode and prior."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(len(results), 2)
    rows = -(-len(results) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(6 * columns, 4 * rows), squeeze=False)
    bins = [i / 20 - 1 for i in range(41)]
    for axis, (mode, (gold, distractor, auc)) in zip(axes.reshape(-1), results.items()):
        axis.hist(distractor, bins=bins, alpha=0.6, density=True,
                  label=f"distractor clusters (n={len(distractor)})")
        axis.hist(gold, bins=bins, alpha=0.6, density=True,
                  label=f"gold-evidence clusters (n={len(gold)})")
        axis.axvline(0, color="black", linewidth=0.8)
        axis.set_xlabel("cluster utility u_c = m_c - p̄")
        axis.set_ylabel("density")
        axis.set_title(f"{mode} clusters: AUC {auc:.3f}")
        axis.legend(fontsize=8)
    figure.suptitle("factutil credit on the 2Wiki sample")
    figure.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)


def main() -> None:
    """Parse arguments, score in each mode, print the credit table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rollouts", type=Path)
    parser.add_argument("--gold", type=Path, help="gold triples (default: 2wiki_gold.json beside the rollouts)")
    parser.add_argument("--modes", default="exact,semantic", help="clustering modes to compare")
    parser.add_argument("--priors", default="beta,group",
                        help="priors of cluster success to compare (FactUtilConfig.prior)")
    parser.add_argument("--config", type=Path)
    parser.add_argument("--set", dest="sets", action="append", default=[])
    parser.add_argument("--passages", action="store_true",
                        help="also score the retrieved passages as facts (facts=retrieved)")
    parser.add_argument("--evidences", type=Path,
                        help="2Wiki records with supporting_facts (default: "
                             "2wiki_dev_compositional30_evidences.jsonl beside the rollouts)")
    parser.add_argument("--plot", type=Path, help="save utility histograms (PNG) here")
    args = parser.parse_args()
    gold_path = args.gold or args.rollouts.with_name("2wiki_gold.json")
    gold_by_uid = load_gold(gold_path)

    table = Table(title="credit check: cluster utility, gold evidence vs distractors", header_style="bold")
    columns = ("mode", "prior", "clusters", "count", "mean utility", "median", "share u > 0",
               "AUC pooled", "AUC within group", "time (s)")
    for column in columns:
        table.add_column(column, justify="left" if column in ("mode", "prior", "clusters") else "right")
    results = {}
    runs = [("asserted", mode, prior) for mode in args.modes.split(",")
            for prior in args.priors.split(",")]
    supporting = {}
    if args.passages:
        runs += [("retrieved", "exact", prior) for prior in args.priors.split(",")]
        evidences = args.evidences or args.rollouts.with_name("2wiki_dev_compositional30_evidences.jsonl")
        for line in evidences.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            supporting[record["_id"]] = {title for title, _ in record["supporting_facts"]}
    for facts, mode, prior in runs:
        config = load_config(args.config, [*args.sets, f"facts={facts}", f"mode={mode}",
                                           f"prior={prior}"])
        with warnings.catch_warnings():
            # The sample's agent asserts: its passages are scored here to compare the credit,
            # not to train it, so the step's warning that its asserts get none is not news.
            warnings.filterwarnings("ignore", "rollouts assert triples", UserWarning)
            result = compute_process_advantages(args.rollouts, config)
        if facts == "retrieved":  # a passage is gold when its title is a supporting paragraph
            labels = [any(member[0] in supporting[cluster.uid] for member in cluster.members)
                      if cluster.uid in supporting else None for cluster in result.clusters]
            mode = "passages"
        else:
            labels = gold_labels(result.clusters, gold_by_uid, config.triple_template)
        utilities = [cluster.utility for cluster in result.clusters]
        gold = [u for u, label in zip(utilities, labels) if label is True]
        distractor = [u for u, label in zip(utilities, labels) if label is False]
        auc = evidence_auc(labels, utilities)
        within = within_group_auc(labels, utilities, [c.uid for c in result.clusters])
        results[f"{mode}, prior={prior}"] = (gold, distractor, auc)
        for name, values in (("gold evidence", gold), ("distractor", distractor)):
            first = name == "gold evidence"
            table.add_row(
                mode if first else "", prior if first else "", name, str(len(values)),
                f"{statistics.fmean(values):+.3f}", f"{statistics.median(values):+.3f}",
                f"{sum(v > 0 for v in values) / len(values):.0%}",
                f"{auc:.3f}" if first else "",
                (f"{within:.3f}" if within is not None else "—") if first else "",
                f"{result.metrics['time_total_s']:.2f}" if first else "",
            )
    console = Console(width=max(Console().width, 132))
    console.print(table)
    console.print("AUC pooled: probability that a gold-evidence cluster has higher utility than a "
                  "distractor cluster; within group: the same over pairs of one question only.")
    if args.plot:
        save_plot(results, args.plot)
        console.print(f"plot saved to {args.plot}")


if __name__ == "__main__":
    main()
