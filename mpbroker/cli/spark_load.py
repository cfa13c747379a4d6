"""``mpbroker-spark-load``: one load of new broker messages into Parquet.

    mpbroker-spark-load (--broker-list HOST:PORT[,..] | --zookeeper ZK)
        (--topic T [--topic T2 ...] | --whitelist REGEX [--topic T ...])
        --output DIR [--master URL] [--max-bytes-per-partition N] [--fetch-size N]
        [--allow-missing-topics]

Before it starts Spark it checks the lock, reaches ZooKeeper (or the brokers) and
finds the partitions of the topics, so that those failures end the command in
seconds. A ``--topic`` that does not exist is refused (exit 2, with the closest known
names) unless ``--allow-missing-topics`` says that waiting for it is intended; a
``--whitelist`` that matches nothing yet is not an error (a warning; nothing loaded).

Without ``--master`` it runs on ``local[2]`` (or what ``spark-submit`` set); ``--master
spark://HOST:7077`` runs it on a standalone cluster whose executors run this venv's Python
(the same path on each worker machine, or ``PYSPARK_PYTHON``). On YARN or another
cluster manager: ``python -m mpbroker.cli.spark_package mpbroker.zip`` then ``spark-submit --master
yarn --py-files mpbroker.zip mpbroker/cli/spark_load.py --zookeeper ... --output DIR`` (see
``mpbroker.cli.spark_package``). The summary is printed as JSON and kept in
``DIR/_mpbroker/loads/``. Exit codes: 0 loaded (or nothing new); 1 the load failed
(nothing committed; the next load redoes it); 2 bad arguments or an unknown topic; 3
no broker or ZooKeeper reachable; 4 another load holds the lock.
"""

import argparse
import json
import logging
import os
import sys

from mpbroker.cli.failure import fail

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_LOCKED = 0, 1, 2, 3, 4
PROG = "mpbroker-spark-load"

log = logging.getLogger(PROG)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="load new broker messages into Parquet with Spark")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--broker-list", help="ID:HOST:PORT[,...] or HOST:PORT[,...]")
    source.add_argument("--zookeeper", metavar="ZK", help="HOST:PORT[,...][/chroot]: brokers and topics from there")
    parser.add_argument("--topic", action="append", default=[], help="a topic to load (repeatable)")
    parser.add_argument("--whitelist", default="", metavar="REGEX",
                        help="every topic it matches (--zookeeper); matching none yet is no error")
    parser.add_argument("--output", required=True, help="the Parquet directory (state in DIR/_mpbroker)")
    parser.add_argument("--master", help="Spark master URL, e.g. local[4] or spark://HOST:7077 "
                                          "(default local[2], or spark-submit's)")
    parser.add_argument("--max-bytes-per-partition", type=int, default=0,
                        help="read at most this many bytes of log per partition in this load (0: all)")
    parser.add_argument("--fetch-size", type=int, default=4 * 1024 * 1024, help="bytes per fetch request")
    parser.add_argument("--allow-missing-topics", action="store_true",
                        help="a --topic that does not exist yet is a warning, not an error (exit 2): "
                             "it is loaded once it exists")
    parser.add_argument("--zk-timeout-ms", type=int, default=6000,
                        help="how long to wait for ZooKeeper (or to connect to a broker) before exit 3, in ms")
    return parser


def spark_session(master: str | None, name: str = PROG):
    """A SparkSession for the load. Started from this command (not ``spark-submit``),
    a local master or a standalone one (``spark://``) runs the Python workers on this
    interpreter, the venv that has mpbroker installed (unless ``PYSPARK_PYTHON`` names
    another): a standalone cluster's executors need that path on their machines."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(name)
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started the JVM and set the master
    if master:
        builder = builder.master(master)
    elif not submitted:
        builder = builder.master("local[2]")
    if not submitted and (not master or master.startswith(("local", "spark://"))):
        # the executors take the driver's PYSPARK_PYTHON (read when the context starts)
        python = os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = builder.config("spark.pyspark.python", python)
    return (builder.config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")  # a progress bar is noise in the cron job's log
            .config("spark.sql.sources.partitionOverwriteMode", "static")
            .config("spark.task.maxFailures", "4")
            .getOrCreate())


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {PROG} %(levelname)s %(name)s: %(message)s")
    for noisy in ("kazoo", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from mpbroker.clients.core.errors import BrokerUnavailableError
    from mpbroker.codec.errors import InvalidTopicError
    from mpbroker.codec.topic_names import check_topic
    from mpbroker.registry.zk_client import ZK_ERRORS, ZooKeeperUnavailable
    from mpbroker.spark_loader.job import LoadOptions, discover_source, run_load
    from mpbroker.spark_loader.state import LoaderState, LoadLockedError

    if not args.topic and not args.whitelist:
        print(f"{PROG}: name at least one --topic or a --whitelist", file=sys.stderr)
        return EXIT_USAGE
    if args.whitelist and not args.zookeeper:
        print(f"{PROG}: --whitelist needs --zookeeper: the 0.7 protocol cannot list a broker's topics",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        for topic in args.topic:
            check_topic(topic)
    except InvalidTopicError as exc:
        return fail(PROG, exc, EXIT_USAGE)
    if args.max_bytes_per_partition < 0 or args.fetch_size < 1:
        print(f"{PROG}: --max-bytes-per-partition must be >= 0 and --fetch-size >= 1", file=sys.stderr)
        return EXIT_USAGE
    options = LoadOptions(output=args.output, topics=args.topic, whitelist=args.whitelist,
                          broker_list=args.broker_list or "", zookeeper=args.zookeeper or "",
                          max_bytes_per_partition=args.max_bytes_per_partition, fetch_size=args.fetch_size,
                          zk_timeout_ms=args.zk_timeout_ms, allow_missing_topics=args.allow_missing_topics)
    spark = None
    try:
        # Before a Spark session is started (seconds of JVM start): a held lock, ZooKeeper
        # or the brokers out of reach, an unknown topic end the command at once.
        probe = LoaderState(args.output)
        probe.lock()
        try:
            stored = probe.read()["offsets"]
        finally:
            probe.unlock()
        source = discover_source(options, stored)
        if source.partitions:  # else nothing to read: the load only records that, without Spark
            spark = spark_session(args.master)
        summary = run_load(spark, options, source)
    except LoadLockedError as exc:
        return fail(PROG, exc, EXIT_LOCKED)
    except (ValueError, InvalidTopicError) as exc:
        return fail(PROG, exc, EXIT_USAGE)
    except (ZooKeeperUnavailable, BrokerUnavailableError) as exc:
        return fail(PROG, exc, EXIT_UNREACHABLE)
    except ZK_ERRORS as exc:
        return fail(PROG, f"lost ZooKeeper while reading the topics: {exc!r}", EXIT_UNREACHABLE)
    except Exception as exc:
        log.exception("the load failed; nothing was committed, the next load redoes it")
        return fail(PROG, f"the load failed: {exc}", EXIT_FAILED)
    finally:
        if spark is not None:
            spark.stop()
    for gap in summary["gaps"]:
        log.error("GAP in %s: offsets %d..%d were deleted by retention before they were loaded",
                  gap["partition"], gap["from"], gap["to"])
    log.info("load %s: %d messages, %d bytes in %.1fs (%d msg/s, %.1f MB/s)%s", summary["load_id"],
             summary["messages"], summary["bytes"], summary["duration_s"], summary["messages_per_s"],
             summary["mb_per_s"], f"; {len(summary['gaps'])} GAPS" if summary["gaps"] else "")
    print(json.dumps(summary, indent=1))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
