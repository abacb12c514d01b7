"""Credit check on the bundled 2Wiki sample: do gold-evidence clusters earn higher utility?

Scores the rollouts with factutil, labels each cluster *gold* when one of its members is a gold
evidence triple of its question (any letter case or wording listed in ``2wiki_gold.json``) and
*distractor* otherwise, then prints the mean utility of each kind and the AUC of utility for
separating them (1.0: every gold cluster above every distractor; 0.5: chance). Optionally saves a
histogram of both utility distributions.

    python examples/credit_check.py examples/data/2wiki_rollouts.jsonl [--modes exact,semantic]
        [--set key=value ...] [--plot FILE]
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
    """(utility, is_gold) per cluster: gold when any member's normalised text is a gold triple's."""
    gold_texts = {
        uid: {triple_text(Triple.model_validate(t), template) for t in entry["gold"]}
        for uid, entry in gold_by_uid.items()
    }
    labelled = []
    for cluster in clusters:
        texts = {triple_text(Triple.model_validate(m), template) for m in cluster.members}
        labelled.append((cluster.utility, bool(texts & gold_texts.get(cluster.uid, set()))))
    return labelled


def save_plot(results, path):
    """Histograms of cluster utilities, gold vs distractor, one panel per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), squeeze=False)
    bins = [i / 20 - 1 for i in range(41)]
    for axis, (mode, (gold, distractor, auc)) in zip(axes[0], results.items()):
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
    parser.add_argument("--config", type=Path)
    parser.add_argument("--set", dest="sets", action="append", default=[])
    parser.add_argument("--plot", type=Path, help="save utility histograms (PNG) here")
    args = parser.parse_args()
    gold_path = args.gold or args.rollouts.with_name("2wiki_gold.json")
    gold_by_uid = json.loads(gold_path.read_text(encoding="utf-8"))

    table = Table(title="credit check: cluster utility, gold evidence vs distractors", header_style="bold")
    for column in ("mode", "clusters", "count", "mean utility", "median", "share u > 0", "AUC", "time (s)"):
        table.add_column(column, justify="left" if column in ("mode", "clusters") else "right")
    results = {}
    for mode in args.modes.split(","):
        config = load_config(args.config, [*args.sets, f"mode={mode}"])
        result = compute_process_advantages(args.rollouts, config)
        labelled = label_clusters(result.clusters, gold_by_uid, config.triple_template)
        gold = [u for u, is_gold in labelled if is_gold]
        distractor = [u for u, is_gold in labelled if not is_gold]
        auc = roc_auc_score([is_gold for _, is_gold in labelled], [u for u, _ in labelled])
        results[mode] = (gold, distractor, auc)
        for name, values in (("gold evidence", gold), ("distractor", distractor)):
            table.add_row(
                mode if name == "gold evidence" else "", name, str(len(values)),
                f"{statistics.fmean(values):+.3f}", f"{statistics.median(values):+.3f}",
                f"{sum(v > 0 for v in values) / len(values):.0%}",
                f"{auc:.3f}" if name == "gold evidence" else "",
                f"{result.metrics['time_total_s']:.2f}" if name == "gold evidence" else "",
            )
    console = Console(width=max(Console().width, 110))
    console.print(table)
    console.print("AUC: probability that a gold-evidence cluster has higher utility than a distractor cluster.")
    if args.plot:
        save_plot(results, args.plot)
        console.print(f"plot saved to {args.plot}")


if __name__ == "__main__":
    main()
