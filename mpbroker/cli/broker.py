"""``mpbroker``: the broker's command line (``mpbroker serve CONFIG``)."""

import argparse
import sys

from mpbroker import __version__


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="mpbroker", description="mpbroker, a Kafka 0.7-style log broker")
    parser.add_argument("--version", action="version", version=f"mpbroker {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run a broker (supervisor, acceptor and partition workers)")
    serve.add_argument("config", help="Java-properties file with Kafka 0.7 key names (see ops/server.properties)")
    serve.add_argument("--override", "-o", action="append", default=[], metavar="KEY=VALUE",
                       help="set a configuration key, overriding the file (repeatable)")
    serve.add_argument("--allow-unknown-keys", action="store_true",
                       help="start even when the configuration has keys mpbroker does not know (each is ignored "
                            "with a warning; same as --override allow.unknown.keys=true); without it they refuse "
                            "to start, with exit code 2")
    args = parser.parse_args(argv)
    if args.command == "serve":
        from mpbroker.supervisor import serve as run_serve

        overrides = args.override + (["allow.unknown.keys=true"] if args.allow_unknown_keys else [])
        return run_serve(args.config, overrides)
    return 2


if __name__ == "__main__":
    sys.exit(main())
