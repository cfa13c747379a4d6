"""``python -m mpbroker.cli.spark_package OUT.zip``: the zip that ``spark-submit --py-files``
ships to the driver and every executor of a cluster, so that they can import the loader.

    python -m mpbroker.cli.spark_package mpbroker.zip
    spark-submit --master yarn --py-files mpbroker.zip /path/to/mpbroker/cli/spark_load.py \\
        --zookeeper zk:2181/mpbroker --topic page-views --output /shared/mpbroker-parquet

The zip holds the Python sources of the ``mpbroker`` package as it is installed: the
package itself, with ``mpbroker.clients`` and ``mpbroker.spark_loader`` inside it (in a
source tree they are the ``clients/`` and ``spark_loader/`` folders beside it, mapped
there by pyproject.toml), taken from where this Python imports them; no bytecode (each
Python compiles its own). Their third-party dependencies (kazoo, xxhash, crcmod, python-snappy, pyarrow: see pyproject.toml) must be installed in the
executors' Python: several are compiled, and Python cannot import compiled modules
from a zip. The main file ``spark-submit`` runs must be a ``.py`` file of its own (it
does not take a module inside a zip): ``mpbroker/cli/spark_load.py``, whose path this command
prints. Entries carry a fixed date, so the same sources give the same zip.

Exit codes: 0 written; 1 it could not be written; 2 bad arguments.
"""

import argparse
import importlib
import os
import sys
import zipfile

PACKAGES = ("mpbroker", "mpbroker.clients", "mpbroker.spark_loader")
PROG = "python -m mpbroker.cli.spark_package"
_FIXED_DATE = (1980, 1, 1, 0, 0, 0)


def package_sources(name: str) -> list:
    """(path on disk, name in the zip) of every ``.py`` file of package ``name`` (dotted),
    sorted; the names are where the files sit in the installed package."""
    root = os.path.dirname(os.path.abspath(importlib.import_module(name).__file__))
    prefix = name.replace(".", "/")
    files = []
    for directory, subdirectories, names in os.walk(root):
        subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__" and not d.startswith("."))
        files += [(os.path.join(directory, f), f"{prefix}/{os.path.relpath(os.path.join(directory, f), root)}"
                   .replace(os.sep, "/")) for f in names if f.endswith(".py")]
    return sorted(files, key=lambda pair: pair[1])


def build(path: str, packages=PACKAGES) -> list:
    """Write the zip to ``path`` (whole or not at all: written aside, then renamed);
    returns the names it holds."""
    by_name = {}  # installed from a wheel, mpbroker/clients/ is walked twice: once is enough
    for package in packages:
        by_name.update((name, source) for source, name in package_sources(package))
    sources = [(source, name) for name, source in sorted(by_name.items())]
    temporary = f"{path}.tmp{os.getpid()}"
    try:
        with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as archive:
            for source, name in sources:
                info = zipfile.ZipInfo(name, _FIXED_DATE)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                with open(source, "rb") as f:
                    archive.writestr(info, f.read())
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return [name for _, name in sources]


def main_script() -> str:
    """The file ``spark-submit`` runs: the loader's command, ``mpbroker/cli/spark_load.py``."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "spark_load.py")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description="build the zip of the loader's packages for "
                                                            "spark-submit --py-files")
    parser.add_argument("output", metavar="OUT.zip", help="the zip to write (replaced if it exists)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    output = os.path.abspath(args.output)
    if not output.endswith(".zip"):
        print(f"{PROG}: {args.output!r}: the name must end in .zip (spark-submit --py-files puts .zip, .egg and "
              f".py files on the Python path)", file=sys.stderr)
        return 2
    if not os.path.isdir(os.path.dirname(output)):
        print(f"{PROG}: {os.path.dirname(output)}: no such directory", file=sys.stderr)
        return 2
    try:
        names = build(output)
    except OSError as exc:
        print(f"{PROG}: could not write {output}: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {output}: {len(names)} files of the packages {', '.join(PACKAGES)}")
    print("run the loader with (add --master URL, or let spark-submit's configuration choose):")
    print(f"  spark-submit --py-files {output} {main_script()} \\\n"
          f"      --zookeeper ZK --topic T --output DIR")
    return 0


if __name__ == "__main__":
    sys.exit(main())
