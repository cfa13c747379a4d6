"""librdkafka's ``rdkafka_performance`` example program, built on this machine: a Kafka
client in C whose own cost is small, for ``bench.modern_bench``'s rdkafka_performance rows
(and for comparing with Apache Kafka). Nothing of librdkafka is in the repository: its
source is fetched through a package registry and the program is built into a cache under
the user's home, ``~/.cache/mpbroker-rdkafka-perf/<source>-<version>/rdkafka_performance``
(``MPBROKER_RDKAFKA_PERF_CACHE`` moves it), the first time (30-90 s on 2 cores), then reused.

    python -m bench.rdkafka_perf [--source crates|debian] [--rebuild]   # build, print the path

    path = program()        # builds it if need be; raises Unavailable(why) if it cannot
    result = consume(path, bootstrap, topic, count)
    result = produce(path, bootstrap, topic, count, size=200, acks=1, conf={"linger.ms": 5})

Where the source comes from (the first that works; ``--source`` or
``MPBROKER_RDKAFKA_PERF_SOURCE`` picks one):

1. ``crates``: the ``rdkafka-sys`` crate on crates.io, pinned (``RDKAFKA_SYS``), whose
   package carries librdkafka's whole source tree (``librdkafka/``, examples included:
   2.12.1 for rdkafka-sys 4.10.0). ``cargo fetch`` of a scratch manifest that depends on
   it (in the cache) brings it into cargo's registry, ``cargo metadata`` says where; the
   tree is copied out of it and built. Needs cargo (rustup's; any cargo that speaks the
   sparse index, 1.68 or newer: an older one reads the index from a host this machine may
   not reach).
2. ``debian``: Debian's ``librdkafka`` source package (librdkafka 2.0.2 on bookworm),
   through ``apt-get source --download-only`` with a private apt configuration in the
   cache: the machine's own Debian sources, turned into ``deb-src`` entries, with their
   own package lists, so that nothing under /etc/apt changes. Its upstream tarball
   (``*.orig.tar.gz``) is unpacked and built; Debian's patches are not applied.

The build: librdkafka's own ``./configure`` with every optional dependency off (TLS,
SASL/GSSAPI, libcurl, zstd, zlib: plain connections to 127.0.0.1, no compression need
nothing else; LZ4 and snappy are built in), ``make -C src librdkafka.a``, then
``make -C examples rdkafka_performance``, linked against that static library: the program
has no run-time dependency beyond libc.

Why not the other ways: compiling ``rdkafka_performance.c`` alone against Debian's
``librdkafka-dev`` or against the librdkafka 2.16 shared object inside the confluent-kafka
wheel does not work as such: the example includes librdkafka's internal headers (``rd.h``,
``rdtime.h``, which read the ``config.h`` that ``./configure`` writes), so a configured
source tree is needed anyway, and none of librdkafka 2.16 is on a reachable registry
(rdkafka-sys's newest vendors 2.12.1); building the static library from that same tree
costs half a minute more and rules out a header and library of different versions.
librdkafka 2.12.1 speaks the versions mpbroker's modern listener advertises (it is of the
2.x line confluent-kafka 2.16's librdkafka is).

Measuring with it: the program keeps its own clock, from its first consumed message to the
N-th (consumer), or from its first ``produce()`` to the last delivery report (producer,
so its connection to the broker is inside it: a few milliseconds of a run of a second),
and prints one summary line at the end; ``consume``/``produce`` read it, check the count
(every message delivered, none failed) and give the seconds by that clock, the child's
CPU seconds (user + system, from ``wait4``) and the wall time of the whole process
(``process_seconds``: start, connection and close included).
"""

import argparse
import contextlib
import fcntl
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

RDKAFKA_SYS = "4.10.0+2.12.1"  # the crate's version; librdkafka's after the '+'
CACHE_ROOT = os.environ.get("MPBROKER_RDKAFKA_PERF_CACHE") or os.path.join(
    os.path.expanduser("~"), ".cache", "mpbroker-rdkafka-perf")
SOURCES = ("crates", "debian")
PROGRAM = "rdkafka_performance"
CONFIGURE_FLAGS = ["--disable-ssl", "--disable-gssapi", "--disable-curl", "--disable-zstd", "--disable-zlib",
                   "--disable-lz4-ext"]
STEP_TIMEOUT_S = 900


class Unavailable(RuntimeError):
    """rdkafka_performance could not be obtained or built here (the message says why)."""


# --- obtaining the source ------------------------------------------------------------------


def _run(argv, cwd=None, what="", env=None, timeout=STEP_TIMEOUT_S) -> str:
    try:
        run = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    except FileNotFoundError:
        raise Unavailable(f"{what or argv[0]}: {argv[0]} is not on PATH") from None
    except subprocess.TimeoutExpired:
        raise Unavailable(f"{what or argv[0]}: still running after {timeout} s") from None
    if run.returncode != 0:
        tail = (run.stdout[-1500:] + "\n" + run.stderr[-2500:]).strip()
        raise Unavailable(f"{what or ' '.join(argv)} failed (exit {run.returncode}):\n{tail}")
    return run.stdout


def _crates_tree(work: str) -> tuple[str, str]:
    """librdkafka's tree from the rdkafka-sys crate: (its directory, librdkafka's version)."""
    cargo = shutil.which("cargo")
    if not cargo:
        raise Unavailable("crates: no cargo on PATH (rustup's cargo fetches rdkafka-sys from crates.io)")
    project = os.path.join(CACHE_ROOT, "cargo-scratch")
    os.makedirs(os.path.join(project, "src"), exist_ok=True)
    with open(os.path.join(project, "Cargo.toml"), "w") as f:
        f.write('[package]\nname = "mpbroker-rdkafka-perf-scratch"\nversion = "0.0.0"\nedition = "2021"\n'
                f'[dependencies]\nrdkafka-sys = {{ version = "={RDKAFKA_SYS}", default-features = false }}\n')
    with open(os.path.join(project, "src", "lib.rs"), "w") as f:
        f.write("")
    _run([cargo, "fetch", "--quiet"], cwd=project, what=f"crates: cargo fetch of rdkafka-sys {RDKAFKA_SYS}")
    metadata = json.loads(_run([cargo, "metadata", "--format-version", "1", "--offline"], cwd=project,
                               what="crates: cargo metadata"))
    crate = next((p for p in metadata["packages"] if p["name"] == "rdkafka-sys"), None)
    if crate is None:
        raise Unavailable("crates: cargo metadata lists no rdkafka-sys")
    tree = os.path.join(os.path.dirname(crate["manifest_path"]), "librdkafka")
    if not os.path.isfile(os.path.join(tree, "examples", f"{PROGRAM}.c")):
        raise Unavailable(f"crates: rdkafka-sys {crate['version']} has no librdkafka/examples/{PROGRAM}.c")
    target = os.path.join(work, "librdkafka")
    shutil.copytree(tree, target, symlinks=True)  # built outside cargo's registry, which stays as fetched
    return target, crate["version"].split("+", 1)[-1]


def _debian_sources() -> str:
    """The machine's Debian sources as deb-src entries (deb822), or '' if none."""
    entries = []
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        with open(path) as f:
            for stanza in f.read().split("\n\n"):
                if re.search(r"^Types:.*\bdeb\b", stanza, re.M) and "debian" in stanza and \
                        not re.search(r"^Enabled:\s*no", stanza, re.M | re.I):
                    entries.append(re.sub(r"^Types:.*$", "Types: deb-src", stanza.strip(), flags=re.M))
    for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
        with contextlib.suppress(OSError), open(path) as f:
            for line in f:
                line = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0])  # one-line style, options dropped
                words = line.split()
                if len(words) >= 4 and words[0] == "deb" and "debian" in words[1]:
                    entries.append(f"Types: deb-src\nURIs: {words[1]}\nSuites: {words[2]}\n"
                                   f"Components: {' '.join(words[3:])}")
    return "\n\n".join(entries)


def _debian_tree(work: str) -> tuple[str, str]:
    """librdkafka's tree from Debian's source package: (its directory, librdkafka's version)."""
    if not shutil.which("apt-get"):
        raise Unavailable("debian: no apt-get here")
    sources = _debian_sources()
    if not sources:
        raise Unavailable("debian: no Debian entry in /etc/apt/sources.list{,.d} to derive deb-src from")
    apt = os.path.join(CACHE_ROOT, "apt")
    for sub in ("etc", "lists/partial", "cache/archives/partial"):
        os.makedirs(os.path.join(apt, sub), exist_ok=True)
    with open(os.path.join(apt, "etc", "deb-src.sources"), "w") as f:
        f.write(sources + "\n")
    options = ["-q", "-o", "Dir::Etc::SourceList=/dev/null", "-o", f"Dir::Etc::SourceParts={apt}/etc",
               "-o", f"Dir::State::Lists={apt}/lists", "-o", f"Dir::Cache={apt}/cache"]
    _run(["apt-get", *options, "update"], what="debian: apt-get update (deb-src lists, in the cache)")
    download = os.path.join(work, "download")
    os.makedirs(download)
    _run(["apt-get", *options, "source", "--download-only", "librdkafka"], cwd=download,
         what="debian: apt-get source --download-only librdkafka")
    tarballs = glob.glob(os.path.join(download, "librdkafka_*.orig.tar.*"))
    if not tarballs:
        raise Unavailable(f"debian: no librdkafka_*.orig.tar.* among {sorted(os.listdir(download))}")
    version = os.path.basename(tarballs[0]).split("_", 1)[1].split(".orig", 1)[0]
    with tarfile.open(tarballs[0]) as archive:
        archive.extractall(work, filter="data")
    trees = glob.glob(os.path.join(work, "*", "examples", f"{PROGRAM}.c"))
    if not trees:
        raise Unavailable(f"debian: librdkafka {version}'s tarball has no examples/{PROGRAM}.c")
    return os.path.dirname(os.path.dirname(trees[0])), version


# --- building ---------------------------------------------------------------------------------


def _build(tree: str) -> str:
    """Configure librdkafka in ``tree``, build its static library and the example: the program's path."""
    for tool in ("make", "cc"):
        if not shutil.which(tool):
            raise Unavailable(f"build: no {tool} on PATH (apt-get install build-essential)")
    jobs = str(os.cpu_count() or 1)
    _run(["./configure", *CONFIGURE_FLAGS], cwd=tree, what="build: librdkafka's ./configure")
    _run(["make", "-j", jobs, "-C", "src", "librdkafka.a"], cwd=tree, what="build: make -C src librdkafka.a")
    _run(["make", "-C", "examples", PROGRAM], cwd=tree, what=f"build: make -C examples {PROGRAM}")
    return os.path.join(tree, "examples", PROGRAM)


def _built(directory: str) -> str | None:
    path = os.path.join(directory, PROGRAM)
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def cached() -> str | None:
    """The program already built in the cache (the preferred source's first), or None."""
    for source in SOURCES:
        for directory in sorted(glob.glob(os.path.join(CACHE_ROOT, f"{source}-*")), reverse=True):
            if _built(directory):
                return _built(directory)
    return None


def _obtain(source: str) -> str:
    with tempfile.TemporaryDirectory(prefix="build-", dir=CACHE_ROOT) as work:
        tree, version = (_crates_tree if source == "crates" else _debian_tree)(work)
        built = _build(tree)
        target = os.path.join(CACHE_ROOT, f"{source}-{version}")
        shutil.rmtree(target, ignore_errors=True)
        os.makedirs(target)
        shutil.copy2(built, os.path.join(target, PROGRAM))
        with open(os.path.join(target, "built.json"), "w") as f:
            json.dump({"source": source, "librdkafka": version,
                       "rdkafka_sys": RDKAFKA_SYS if source == "crates" else None,
                       "configure": CONFIGURE_FLAGS, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                      f, indent=1)
        return _built(target)


def program(source: str | None = None, rebuild: bool = False, log=None) -> str:
    """The path of rdkafka_performance, built first if it is not in the cache (one build at
    a time: a lock file in the cache). ``source``: ``crates`` or ``debian`` only (default:
    ``MPBROKER_RDKAFKA_PERF_SOURCE``, else each in turn). Raises ``Unavailable`` with every
    source's reason when none works."""
    source = source or os.environ.get("MPBROKER_RDKAFKA_PERF_SOURCE") or None
    if source is not None and source not in SOURCES:
        raise ValueError(f"source {source!r}: one of {SOURCES}")
    try:
        os.makedirs(CACHE_ROOT, exist_ok=True)
    except OSError as error:
        raise Unavailable(f"cannot create the cache {CACHE_ROOT}: {error}") from None
    with open(os.path.join(CACHE_ROOT, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not rebuild:
            found = [_built(d) for d in sorted(glob.glob(os.path.join(CACHE_ROOT, f"{source}-*")), reverse=True)] \
                if source else [cached()]
            if any(found):
                return next(p for p in found if p)
        reasons = []
        for candidate in [source] if source else SOURCES:
            if log:
                log(f"building {PROGRAM} from {candidate} into {CACHE_ROOT} (once; 30-90 s) ...")
            try:
                return _obtain(candidate)
            except Unavailable as error:
                reasons.append(str(error))
        raise Unavailable(f"{PROGRAM} could not be built: " + "\n".join(reasons))


def built_info(path: str) -> dict:
    """What ``built.json`` beside the program says (source, librdkafka's version)."""
    try:
        with open(os.path.join(os.path.dirname(path), "built.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


# --- running ------------------------------------------------------------------------------------

_CONSUMED = re.compile(r"^% (\d+) messages \((\d+) bytes\) consumed in (\d+)ms: (\d+) msgs/s", re.M)
_PRODUCED = re.compile(r"^% (\d+) messages produced \((\d+) bytes\), (\d+) delivered \(offset (-?\d+), (\d+) failed\) "
                       r"in (\d+)ms: (\d+) msgs/s", re.M)


def parse_consumed(output: str) -> dict:
    """The last consumer summary line: messages, bytes, and seconds by the program's clock
    (from its msg/s, computed from microseconds; the milliseconds it prints are coarse)."""
    lines = _CONSUMED.findall(output)
    if not lines:
        raise ValueError("no consumer summary line")
    messages, size, millis, rate = map(int, lines[-1])
    return {"messages": messages, "bytes": size, "seconds": messages / rate if rate else millis / 1000}


def parse_produced(output: str) -> dict:
    """The last producer summary line: produced, delivered and failed messages, seconds."""
    lines = _PRODUCED.findall(output)
    if not lines:
        raise ValueError("no producer summary line")
    produced, size, delivered, _, failed, millis, rate = map(int, lines[-1])
    return {"messages": delivered, "produced": produced, "bytes": size, "delivered": delivered, "failed": failed,
            "seconds": delivered / rate if rate else millis / 1000}


def _run_program(argv: list, timeout_s: float, exit_codes=(0,)) -> tuple[str, float, float]:
    """(stdout, the child's CPU seconds, wall seconds of the whole process)."""
    started = time.perf_counter()
    deadline = time.monotonic() + timeout_s
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        killed = False
        while True:  # wait4, not wait: the child's own rusage
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if not killed and time.monotonic() > deadline:
                process.kill()
                killed = True
            time.sleep(0.002)
        process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if killed or process.returncode not in exit_codes:
        why = f"killed after {timeout_s} s" if killed else f"exit {process.returncode}"
        raise RuntimeError(f"{' '.join(argv)}: {why}\n{stdout[-1500:]}\n{stderr[-1500:]}")
    return stdout, usage.ru_utime + usage.ru_stime, wall


def _conf_args(conf: dict | None) -> list:
    return [arg for key, value in (conf or {}).items() for arg in ("-X", f"{key}={value}")]


def consume(path: str, bootstrap: str, topic: str, count: int, partition: int = 0, conf: dict | None = None,
            timeout_s: float = 120) -> dict:
    """``rdkafka_performance -C``: partition ``partition`` of ``topic`` from its beginning
    until ``count`` messages (``-c``), queue (callback) mode, nothing printed per message.
    Checks that at least ``count`` were read: the program stops taking messages out of its
    local queue after the call that reached ``count``, and one call can hand over every
    message already fetched (so exactly ``count`` only when the partition holds no more)."""
    argv = [path, "-C", "-b", bootstrap, "-t", topic, "-p", str(partition), "-o", "beginning", "-c", str(count),
            "-X", "log_level=3", *_conf_args(conf)]
    stdout, cpu, wall = _run_program(argv, timeout_s)
    result = parse_consumed(stdout)
    if result["messages"] < count:
        raise RuntimeError(f"{topic}: rdkafka_performance read {result['messages']} messages, expected {count}")
    return {**result, "client_cpu_s": cpu, "process_seconds": wall}


def produce(path: str, bootstrap: str, topic: str, count: int, size: int = 200, acks: int = 1, partition: int = 0,
            conf: dict | None = None, timeout_s: float = 180) -> dict:
    """``rdkafka_performance -P``: ``count`` messages of ``size`` bytes to ``partition``
    with ``acks``, a delivery report for each; checks that all ``count`` were delivered.

    The program's exit code is not the judge: it exits 1 when its produced count, less
    ``rd_kafka_outq_len()`` at the end, differs from the delivered count, and that length
    can still count a request in flight (seen: 1) after every message was delivered; the
    summary line's delivered and failed counts are checked instead."""
    argv = [path, "-P", "-b", bootstrap, "-t", topic, "-p", str(partition), "-s", str(size), "-a", str(acks),
            "-c", str(count), "-X", "log_level=3", *_conf_args(conf)]
    stdout, cpu, wall = _run_program(argv, timeout_s, exit_codes=(0, 1))
    result = parse_produced(stdout)
    if result["delivered"] != count or result["failed"]:
        raise RuntimeError(f"{topic}: rdkafka_performance delivered {result['delivered']} of {count} messages, "
                           f"{result['failed']} failed")
    return {**result, "client_cpu_s": cpu, "process_seconds": wall}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", choices=SOURCES, help="only this source (default: each in turn)")
    parser.add_argument("--rebuild", action="store_true", help="build again even if the cache has it")
    args = parser.parse_args(argv)
    try:
        path = program(args.source, args.rebuild, log=lambda line: print(line, file=sys.stderr, flush=True))
    except Unavailable as error:
        print(error, file=sys.stderr)
        return 1
    print(path)
    print(json.dumps(built_info(path)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
