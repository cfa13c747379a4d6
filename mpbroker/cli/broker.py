"""``mpbroker``: the broker's command line (``mpbroker serve CONFIG``): load the
configuration, run the supervisor until it stops. Exit codes: 0 stopped, 1 could not
start (the log says why in one line), 2 a configuration error."""

import argparse
import errno
import logging
import sys

from mpbroker import __version__

log = logging.getLogger("mpbroker.supervisor")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="mpbroker", description="mpbroker, a Kafka 0.7-style log broker")
    parser.add_argument("--version", action="version", version=f"mpbroker {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser("serve", help="run a broker (supervisor, acceptor and partition workers)")
    serve_parser.add_argument("config",
                              help="Java-properties file with Kafka 0.7 key names (see ops/server.properties)")
    serve_parser.add_argument("--override", "-o", action="append", default=[], metavar="KEY=VALUE",
                       help="set a configuration key, overriding the file (repeatable)")
    serve_parser.add_argument("--allow-unknown-keys", action="store_true",
                       help="start even when the configuration has keys mpbroker does not know (each is ignored "
                            "with a warning; same as --override allow.unknown.keys=true); without it they refuse "
                            "to start, with exit code 2")
    args = parser.parse_args(argv)
    if args.command == "serve":
        overrides = args.override + (["allow.unknown.keys=true"] if args.allow_unknown_keys else [])
        return serve(args.config, overrides)
    return 2


def serve(config_path: str, overrides=()) -> int:
    """Load the configuration, run the supervisor until it stops; the exit code."""
    from mpbroker.config.broker_config import load_config
    from mpbroker.config.errors import ConfigError
    from mpbroker.logging_setup import configure_logging
    from mpbroker.supervision.preflight import StartupError
    from mpbroker.supervisor import Supervisor

    try:
        config, warnings = load_config(config_path, overrides)
    except ConfigError as exc:
        configure_logging("INFO", "supervisor")
        log.critical("%s", exc)
        return 2
    configure_logging(config.log_level, "supervisor")
    for warning in warnings:
        log.warning("%s", warning)
    try:
        return Supervisor(config, config_path, overrides).run()
    except StartupError as exc:
        log.critical("cannot start: %s", exc)
        return 1
    except OSError as exc:
        if exc.errno == errno.EACCES:
            log.critical("cannot start: %s", exc)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
