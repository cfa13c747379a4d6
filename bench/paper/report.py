"""The paper benchmark's report: every run in one table, mpbroker against each peer in
a second (with its ratio to it; a peer that did not run has no column), the issue's
targets checked, all written through ``bench.common.write_results`` to
``bench/results/paper.{json,md}`` (or another directory)."""

from bench.common import RESULTS_DIR, print_table, write_results

PEERS = ("rabbitmq", "activemq", "kafka")
MPBROKER_MODES = ("mpbroker", "kafka")  # Kafka's runs are named, and set up, as mpbroker's

# (what is compared, mpbroker's (and Kafka's) producer mode or "consume", the queues' mode or "consume")
COMPARISONS = (
    ("produce, fire-and-forget, mpbroker and Kafka batch 50", "b50-ff", "ff"),
    ("produce, fire-and-forget, mpbroker and Kafka batch 1", "b1-ff", "ff"),
    ("produce, acknowledged per message (append / confirm / receipt / acks=1)", "b1-ack", "ack-1"),
    ("produce, acknowledged per 50 (append / confirms / transaction / acks=1)", "b50-ack", "ack-50"),
    ("produce, acknowledged per 50 once on disk (flush / confirms / transaction / acks=1 "
     "flush.messages=1)", "b50-flush", "ack-50"),
    ("consume everything, one consumer", "consume", "consume"),
)

# (what, mpbroker's run, peer or None, least value: msg/s, or a ratio to the peer)
TARGETS = (
    ("mpbroker produces >= 400,000 msg/s at batch 50", "b50-ff", None, 400_000),
    ("mpbroker consumes >= 1,000,000 msg/s", "consume", None, 1_000_000),
    ("producer: mpbroker >= 5x RabbitMQ", "b50-ff", ("rabbitmq", "ff"), 5),
    ("producer: mpbroker >= 10x ActiveMQ", "b50-ff", ("activemq", "ff"), 10),
    ("consumer: mpbroker >= 5x RabbitMQ", "consume", ("rabbitmq", "consume"), 5),
    ("consumer: mpbroker >= 10x ActiveMQ", "consume", ("activemq", "consume"), 10),
)


def find_run(runs: list, system: str, mode: str) -> dict | None:
    """The run of ``system`` in ``mode`` (a producer mode, or "consume")."""
    for run in runs:
        if run["system"] == system and run["mode"] == mode:
            return run
    return None


def _rate(run: dict | None) -> str:
    return f"{run['messages_per_s']:,.0f}" if run else "-"


def _ratio(ours: dict | None, theirs: dict | None) -> str:
    if not ours or not theirs:
        return "-"
    return f"{ours['messages_per_s'] / theirs['messages_per_s']:,.1f}x"


def runs_table(runs: list) -> str:
    rows = []
    for run in runs:
        disk = "-"
        if run.get("disk_bytes_per_message") is not None:
            disk = f"{run['disk_bytes_per_message']:,.1f} ({run['overhead_bytes_per_message']:+,.1f})"
        rows.append([run["system"], run["experiment"], run["label"], f"{run['messages']:,}",
                     f"{run['messages_per_s']:,.0f}", f"{run['mb_per_s']:,.1f}", disk])
    return print_table("Every run (200-byte messages; MB/s of payload; disk: bytes per message, "
                       "in brackets the overhead beyond the 200-byte payload)",
                       ["system", "experiment", "mode", "messages", "messages/s", "MB/s", "disk B/msg"], rows)


def _mode_of(system: str, ours_mode: str, queues_mode: str) -> str:
    """The run of ``system`` that a comparison row takes: mpbroker's mode, or the queues'."""
    return ours_mode if system in MPBROKER_MODES else queues_mode


def comparison_table(runs: list) -> str:
    peers = [peer for peer in PEERS if any(run["system"] == peer for run in runs)]
    rows = []
    for what, ours_mode, queues_mode in COMPARISONS:
        ours = find_run(runs, "mpbroker", ours_mode)
        if ours is None:
            continue
        row = [what, _rate(ours)]
        for peer in peers:
            theirs = find_run(runs, peer, _mode_of(peer, ours_mode, queues_mode))
            row += [_rate(theirs), _ratio(ours, theirs)]
        rows.append(row)
    disk_row = ["disk bytes per 200-byte message"]
    for system in ("mpbroker", *peers):
        run = find_run(runs, system, _mode_of(system, "b50-ff", "ff"))
        disk_row.append(f"{run['disk_bytes_per_message']:,.1f}" if run else "-")
        if system != "mpbroker":
            disk_row.append("")
    rows.append(disk_row)
    return print_table("mpbroker against the peers (messages/s; ratio = mpbroker / peer)",
                       ["experiment", "mpbroker", *(h for peer in peers for h in (peer, "ratio"))], rows)


def check_targets(runs: list) -> tuple:
    """(table text, [{target, value, met}, ...]) for the targets that could be checked."""
    rows, checks = [], []
    for what, ours_mode, peer, least in TARGETS:
        ours = find_run(runs, "mpbroker", ours_mode)
        theirs = find_run(runs, *peer) if peer else None
        if ours is None or (peer and theirs is None):
            continue
        value = ours["messages_per_s"] / theirs["messages_per_s"] if peer else ours["messages_per_s"]
        met = value >= least
        checks.append({"target": what, "value": round(value, 2), "met": met})
        rows.append([what, f"{value:,.1f}x" if peer else f"{value:,.0f}", "met" if met else "MISSED"])
    if not rows:
        return "", checks
    return print_table("Targets of issue 8", ["target", "measured", ""], rows), checks


def write_report(runs: list, details: dict, directory: str = RESULTS_DIR) -> str:
    tables = [comparison_table(runs)]
    print()
    tables.append(runs_table(runs))
    print()
    targets_text, checks = check_targets(runs)
    if targets_text:
        tables.append(targets_text)
    versions = ", ".join(f"{name} {version}" for name, version in details["versions"].items())
    load = details["load_average"]
    text = "\n\n".join(tables) + (f"\n\nVersions: {versions}\nSettings: {details['settings']}\n"
                                  f"Load average (1, 5, 15 min) at the start: {load['start']}, "
                                  f"at the end: {load['end']}")
    for absent in details.get("left_out", ()):
        text += f"\n\nLeft out: {absent['system']}: {absent['reason'].splitlines()[0][:300]}"
    for failure in details["failures"]:
        text += f"\n\nFAILED: {failure['system']}: {failure['error'].splitlines()[0][:300]}"
    return write_results("paper", text, {**details, "targets": checks, "runs": runs}, directory)
