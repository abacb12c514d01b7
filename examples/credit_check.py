"""Credit check on the bundled 2Wiki sample: do gold-evidence clusters earn higher utility?

Scores the rollouts with factutil, labels each cluster *gold* when one of its members is a gold
evidence triple of its question (any letter case or wording listed in ``2wiki_gold.json``) and
*distractor* otherwise, then prints the mean utility of each kind and two AUCs of utility for
separating them (1.0: every gold cluster above every distractor; 0.5: chance): *pooled* over all
clusters of the sample, and *within-group*, over the (gold, distractor) pairs of one question only —
the comparison a policy update makes, since utilities are relative to each group's success rate.
Each clustering mode runs under each prior (``FactUtilConfig.prior``). Optionally saves a
histogram of both utility distributions.

    python examples/credit_check.py examples/data/2wiki_rollouts.jsonl [--modes exact,semantic]
        [--priors beta,group] [--set key=value ...] [--plot FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from rich.console import Console
from rich.table import Table
from sklearn.metrics import roc_auc_score

from factutil import Triple, compute_process_advantages
from factutil.cli import load_config
from factutil.cluster import triple_text


def label_clusters(clusters, gold_by_uid, template):
    """(utility, is_gold, uid) per cluster: gold when any member's normalised text is a gold triple's."""
    gold_texts = {
        uid: {triple_text(Triple.model_validate(t), template) for t in entry["gold"]}
        for uid, entry in gold_by_uid.items()
    }
    labelled = []
    for cluster in clusters:
        texts = {triple_text(Triple.model_validate(m), template) for m in cluster.members}
        labelled.append((cluster.utility, bool(texts & gold_texts.get(cluster.uid, set())), cluster.uid))
    return labelled


def within_group_auc(labelled):
    """P(u_gold > u_distractor) + P(tie) / 2 over every (gold, distractor) pair of one question.

    Pairs from all questions are counted together (a question with more pairs weighs more); a
    question with no gold or no distractor cluster adds no pair. None when no pair exists.
    """
    by_uid: dict[str, tuple[list[float], list[float]]] = {}
    for utility, is_gold, uid in labelled:
        by_uid.setdefault(uid, ([], []))[0 if is_gold else 1].append(utility)
    wins = pairs = 0.0
    for gold, distractor in by_uid.values():
        for g in gold:
            wins += sum(1.0 if g > d else 0.5 if g == d else 0.0 for d in distractor)
        pairs += len(gold) * len(distractor)
    return wins / pairs if pairs else None


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
    parser.add_argument("--plot", type=Path, help="save utility histograms (PNG) here")
    args = parser.parse_args()
    gold_path = args.gold or args.rollouts.with_name("2wiki_gold.json")
    gold_by_uid = json.loads(gold_path.read_text(encoding="utf-8"))

    table = Table(title="credit check: cluster utility, gold evidence vs distractors", header_style="bold")
    columns = ("mode", "prior", "clusters", "count", "mean utility", "median", "share u > 0",
               "AUC pooled", "AUC within group", "time (s)")
    for column in columns:
        table.add_column(column, justify="left" if column in ("mode", "prior", "clusters") else "right")
    results = {}
    for mode in args.modes.split(","):
        for prior in args.priors.split(","):
            config = load_config(args.config, [*args.sets, f"mode={mode}", f"prior={prior}"])
            result = compute_process_advantages(args.rollouts, config)
            labelled = label_clusters(result.clusters, gold_by_uid, config.triple_template)
            gold = [u for u, is_gold, _ in labelled if is_gold]
            distractor = [u for u, is_gold, _ in labelled if not is_gold]
            auc = roc_auc_score([is_gold for _, is_gold, _ in labelled], [u for u, _, _ in labelled])
            within = within_group_auc(labelled)
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
