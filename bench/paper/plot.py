"""The paper benchmark's figure, in the style of the paper's figures 4 and 5:
throughput (messages/s) over the data sent, producer runs on the left, consumers on the
right, one colour per system. Written with matplotlib's Agg backend (no display)."""

import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench.paper.timeline import interval_rates

COLOURS = {"mpbroker": "tab:blue", "rabbitmq": "tab:orange", "activemq": "tab:green", "kafka": "tab:red"}
LINE_STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)))


def _draw(axes, runs: list, title: str) -> None:
    styles_used = {}
    for run in runs:
        points = interval_rates(run["samples"])
        if not points:
            continue
        index = styles_used.setdefault(run["system"], 0)
        styles_used[run["system"]] = index + 1
        sent, rates = zip(*points)
        axes.plot(sent, rates, marker="o", markersize=3, color=COLOURS.get(run["system"], "black"),
                  linestyle=LINE_STYLES[index % len(LINE_STYLES)], label=f"{run['system']}: {run['label']}")
    axes.set_title(title)
    axes.set_xlabel("data sent (MB of 200-byte messages)")
    axes.set_ylabel("throughput (messages/s, log scale)")
    axes.set_yscale("log")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False, handlelength=4)


def plot(runs: list, path: str, subtitle: str = "") -> str:
    figure, (producer_axes, consumer_axes) = plt.subplots(1, 2, figsize=(15, 8))
    _draw(producer_axes, [r for r in runs if r["experiment"] == "produce"], "Producer performance")
    _draw(consumer_axes, [r for r in runs if r["experiment"] == "consume"], "Consumer performance")
    if subtitle:
        figure.suptitle(textwrap.fill(subtitle, 170), fontsize=10)  # a long list of versions: wrapped, not cut
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
