"""The supervisor: the one place where the broker's processes are made, watched and
stopped (gunicorn's arbiter is the model).

It loads nothing itself but the configuration; before forking it makes everything
the children share (the listening socket, the shared-memory rings and tables, the
control channels), so a respawned child inherits the same ones. Whatever can stop a
start (an unusable log.dir, too few file descriptors for the segment files, a taken
port) is found then and reported as one StartupError line; the clean-shutdown marker
is taken last, so a failed start leaves it. It then forks the partition workers,
waits until each has opened its logs, forks the acceptor and tells systemd it is
ready (below). Its loop only reacts: signals arrive through a wake-up fd, children
through their control channels and SIGCHLD, ``mpbroker-ctl`` through the control socket
(``control_server``: non-blocking clients in the same selector, so none can hold the
loop), plus once-a-second checks (heartbeats, respawn back-off, control deadlines).

A worker that dies is respawned in the same slot with the same partitions, after the
acceptor has failed what was in flight to it (the ``worker_down`` handshake) and
the supervisor has emptied that worker's rings. The acceptor is respawned at once.
A child that dies within YOUNG_DEATH_S of its start waits a back-off that doubles
with each such death (at most MAX_RESPAWN_BACKOFF_S); the log line of the death and
the status (``respawn_in_s``) say how long.

Ready (systemd's READY=1, ``"ready": true`` in the status) means a client can use the
broker: the acceptor takes connections and, with ZooKeeper, ``/brokers/ids/<id>`` is
written, so a producer that discovers brokers through ZooKeeper finds this one as soon as
``systemctl start`` returns. ZooKeeper must not keep the broker from serving, so the
wait for the registration is bounded: READY=1 comes once the registrar reports the
broker registered, or zk.connectiontimeout.ms after the acceptor came up, whichever is
first (the log says which: "registered in ZooKeeper" or "not registered in ZooKeeper
within ... ms"); when ZooKeeper did not answer the registrar's first check at start-up
(which already waited zk.connectiontimeout.ms), READY=1 comes with the acceptor. In
each case the registrar goes on trying and registers once ZooKeeper answers.

systemd: READY=1 also ends a reload (which begins with RELOADING=1 and MONOTONIC_USEC=),
STOPPING=1 starts either stop, and WATCHDOG=1 goes out every half of $WATCHDOG_USEC (the
loop never sleeps past the next one).

Signals: TERM (or ``mpbroker-ctl shutdown``) stops gracefully: the acceptor first
(no new requests, in-flight ones answered), then the workers (flush, close); when
every worker stopped cleanly the clean-shutdown marker is written. INT and QUIT stop
fast (no flush, no marker: the next start recovers). HUP reloads the configuration
file and hands the settings that can change at run time to the children.
"""

import collections
import contextlib
import errno
import fcntl
import logging
import os
import platform
import resource
import selectors
import signal
import socket
import time

from mpbroker import descriptor_budget, systemd
from mpbroker.acceptor.acceptor import Acceptor
from mpbroker.clock import monotonic_ms, wall_clock_ms
from mpbroker.config.broker_config import load_config
from mpbroker.config.errors import ConfigError
from mpbroker.control_server import ControlServer
from mpbroker.ipc.control import ControlChannel
from mpbroker.ipc.counters import CounterTable
from mpbroker.ipc.partition_table import PartitionTable, published_partitions
from mpbroker.ipc.ring import Ring
from mpbroker.ipc.slot_table import SlotState, SlotTable
from mpbroker.logging_setup import configure_logging, set_level, set_role
from mpbroker.process import die_with_parent, reset_signals, set_process_name
from mpbroker.registrar import EXIT_ID_CONFLICT
from mpbroker.registry import layout
from mpbroker.segments.clean_shutdown import take_marker, write_marker
from mpbroker.workers.worker import PartitionWorker

log = logging.getLogger(__name__)

PARTITIONS_PER_WORKER = 32768
ACK_TIMEOUT_S = 2.0
ACCEPTOR_STOP_TIMEOUT_S = 15.0
WORKER_STOP_TIMEOUT_S = 120.0
FAST_STOP_TIMEOUT_S = 5.0
MAX_RESPAWN_BACKOFF_S = 30.0
YOUNG_DEATH_S = 5.0  # a child that dies younger than this is respawned after a growing back-off
RATE_SAMPLE_S = 5.0
RATE_WINDOW_S = 60.0
# Settings a running broker can take from a reload (HUP); anything else needs a restart.
RELOADABLE = {
    "log.flush.interval", "topic.log.flush.interval", "log.default.flush.scheduler.interval.ms",
    "log.default.flush.interval.ms", "topic.flush.intervals.ms", "log.retention.hours",
    "topic.log.retention.hours", "log.retention.size", "log.cleanup.interval.mins", "log.roll.hours",
    "log.file.size", "max.message.size", "max.inflated.request.bytes", "log.level",
    "worker.heartbeat.timeout.ms", "max.connections", "connections.max.idle.ms", "max.queued.responses",
    "max.connections.per.ip", "request.receive.timeout.ms", "log.flush.offset.checkpoint.interval.ms",
    "allow.unknown.keys",  # applies while the file is read
}

SHORT_ROLES = {"acceptor": "acc", "registrar": "zk", "metrics": "metrics"}
REGISTRAR_STOP_TIMEOUT_S = 10.0
METRICS_STOP_TIMEOUT_S = 5.0
SD_LISTEN_FDS_START = 3  # the first socket systemd passes (socket activation)

RUNNING, STOPPING_ACCEPTOR, STOPPING_WORKERS, STOPPED = "running", "stopping acceptor", "stopping workers", "stopped"


class StartupError(Exception):
    """The broker cannot start; the message says why."""


@contextlib.contextmanager
def _start_step(what: str):
    """A start-up step: an OSError in it becomes a StartupError starting with ``what``."""
    try:
        yield
    except OSError as exc:
        raise StartupError(f"{what}: {exc.strerror or exc}") from exc


class Child:
    """One process slot: a worker (slot 0..N-1), the acceptor (slot N), with ZooKeeper
    the registrar (slot N+1), with metrics.enable the metrics exporter (slot N+2)."""

    def __init__(self, slot: int, role: str):
        self.slot = slot
        self.role = role
        self.pid = 0
        self.generation = 0
        self.restarts = 0
        self.started = 0.0  # time.monotonic() of the last fork
        self.started_ms = 0
        self.ready = False
        self.channel, self.child_channel = ControlChannel.pair()
        self.awaiting_ack = None  # generation of a worker_down the acceptor has not acknowledged
        self.ack_deadline = 0.0
        self.respawn_at = None
        self.backoff = 0.0
        self.last_exit = None
        self.stop_deadline = None
        self.killed_silent = False  # SIGKILLed for a missed heartbeat; waiting for its death

    @property
    def alive(self) -> bool:
        return self.pid > 0

    @property
    def name(self) -> str:
        return self.role if self.role != "worker" else f"worker {self.slot}"


class Supervisor:
    def __init__(self, config, config_path: str | None = None, overrides=()):
        self.config = config
        self.config_path = config_path
        self.overrides = list(overrides)
        self.pid = os.getpid()
        self.phase = RUNNING
        self.fast = False
        self.exit_code = 0
        self._started_at = time.monotonic()
        self._ready_notified = False  # READY=1 sent: serving (and registered, or given up waiting)
        self._accepting = False  # the first acceptor took connections
        self._ready_deadline = None  # waiting for the registration until then (time.monotonic())
        self._zk_answered = None  # what the registrar's last "checked" said: ZooKeeper answered
        self.registrar_checked = False  # the registrar checked the broker id (or ZooKeeper was away)
        self.zk_state = None  # the registrar's last report
        self._rate_samples = collections.deque()
        self._next_rate_sample = 0.0
        self._next_watchdog = 0.0

    # --- start ------------------------------------------------------------------

    def _prepare(self) -> None:
        """Everything that can stop a start, each failure a StartupError saying what. The
        clean-shutdown marker is taken last: a start that fails leaves it for the next."""
        if platform.machine() not in ("x86_64", "AMD64"):
            raise StartupError(f"the shared-memory rings rely on x86-64 memory ordering; this is {platform.machine()}")
        config = self.config
        self._raise_file_limit()
        self._open_log_dir()
        workers = config.num_workers
        with _start_step("cannot make the shared-memory rings and tables"):
            self.request_rings = [Ring(config.ring_buffer_bytes) for _ in range(workers)]
            self.answer_rings = [Ring(max(1 << 20, config.ring_buffer_bytes // 4)) for _ in range(workers)]
            self.tables = [PartitionTable(PARTITIONS_PER_WORKER) for _ in range(workers)]
            self.slots = SlotTable(workers + 3)
            self.counters = CounterTable(workers + 3)
            self.workers = [Child(slot, "worker") for slot in range(workers)]
            self.acceptor = Child(workers, "acceptor")
            self.registrar = Child(workers + 1, "registrar") if config.enable_zookeeper else None
            self.metrics = Child(workers + 2, "metrics") if config.metrics_enable else None
        self.children = [child for child in (*self.workers, self.acceptor, self.registrar, self.metrics) if child]
        self._check_file_limit()
        self.creator_id = layout.creator_id()  # the same for every registrar this supervisor starts
        self.listener = self._listen()
        self.listen_port = self.listener.getsockname()[1]
        self.metrics_listener = self._listen_for_metrics() if self.metrics else None
        try:
            self.control_server = ControlServer(config.control_socket_path, config.control_socket_group)
        except OSError as exc:
            raise StartupError(f"cannot create the control socket {config.control_socket_path}: {exc}") from exc
        except Exception as exc:
            raise StartupError(str(exc)) from exc
        try:
            with _start_step(f"cannot take the clean-shutdown marker in log.dir {config.log_dir}"):
                self.clean = take_marker(config.log_dir)
        except StartupError:
            self.control_server.close()
            raise

    @staticmethod
    def _raise_file_limit() -> None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            except (OSError, ValueError) as exc:
                log.warning("cannot raise the file descriptor limit from %d to %d: %s", soft, hard, exc)

    def _check_file_limit(self) -> None:
        """Refuse to start when a worker could not open its segment files (descriptor_budget)."""
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if limit == resource.RLIM_INFINITY:
            return
        with _start_step(f"cannot count the segment files under log.dir {self.config.log_dir}"):
            inherited = len(os.listdir("/proc/self/fd"))  # what every child starts with
            refusal, warning = descriptor_budget.check(self.config.log_dir, self.config.num_workers,
                                                       self.config.max_connections, limit, inherited)
        if refusal:
            raise StartupError(refusal)
        if warning:
            log.warning("%s", warning)

    def _open_log_dir(self) -> None:
        """Create log.dir if needed, check that it is a writable directory, lock it."""
        log_dir = self.config.log_dir
        try:
            os.makedirs(log_dir, 0o755, exist_ok=True)
        except FileExistsError:
            raise StartupError(f"log.dir {log_dir} is not a directory") from None
        except OSError as exc:
            raise StartupError(f"cannot create log.dir {log_dir}: {exc.strerror}") from exc
        if not os.path.isdir(log_dir):
            raise StartupError(f"log.dir {log_dir} is not a directory")
        with _start_step(f"cannot check log.dir {log_dir}"):
            writable = os.access(log_dir, os.W_OK | os.X_OK)
            read_only = not writable and os.statvfs(log_dir).f_flag & os.ST_RDONLY
        if read_only:
            raise StartupError(f"log.dir {log_dir} is on a read-only file system")
        if not writable:
            raise StartupError(f"log.dir {log_dir} is not writable by this user (uid {os.geteuid()})")
        path = os.path.join(log_dir, ".lock")
        with _start_step(f"cannot open the lock file of log.dir {path}"):
            self._lock_fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StartupError(f"another broker is using log.dir {log_dir}") from None
        except OSError as exc:
            raise StartupError(f"cannot lock log.dir {path}: {exc.strerror}") from exc

    def _listen(self) -> socket.socket:
        activated = self._socket_from_systemd()
        if activated is not None:
            return activated
        return self._bind(self.config.hostname, self.config.port, "port")

    @staticmethod
    def _bind(host: str, port: int, key: str) -> socket.socket:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = None
        try:
            listener = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((host, port))
            listener.listen(1024)
        except OSError as exc:
            if listener is not None:
                listener.close()
            raise StartupError(f"cannot listen on {host or '*'}:{port} ({key}): {exc.strerror or exc}") from exc
        return listener

    def _socket_from_systemd(self):
        """The listening socket systemd passed (socket activation, ``ops/mpbroker.socket``),
        or None when started without one."""
        count = os.environ.get("LISTEN_FDS", "")
        if os.environ.get("LISTEN_PID") != str(os.getpid()) or not count.isdigit() or int(count) < 1:
            return None
        for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
            os.environ.pop(name, None)  # for this process only, as sd_listen_fds(unset_environment=1) does
        fd = SD_LISTEN_FDS_START
        with _start_step(f"the file descriptor systemd passed ({fd}) is not a usable socket"):
            os.set_inheritable(fd, False)
            listener = socket.socket(fileno=fd)
        if listener.type != socket.SOCK_STREAM or not listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            raise StartupError("the socket systemd passed is not a listening stream socket (check ListenStream=)")
        address = listener.getsockname()
        if address[1] != self.config.port:
            log.warning("listening on port %d, passed by systemd; port=%d in the configuration is not used",
                        address[1], self.config.port)
        log.info("using the listening socket passed by systemd (%s)", address[:2])
        return listener

    def _listen_for_metrics(self) -> socket.socket:
        return self._bind(self.config.metrics_host, self.config.metrics_port, "metrics.port")

    @property
    def port(self) -> int:
        return self.listen_port

    # --- children ---------------------------------------------------------------

    def _fork(self, child: Child, target) -> None:
        child.generation += 1
        self.slots.beat(child.slot, monotonic_ms())  # the child beats from here on
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                reset_signals()
                die_with_parent(self.pid)
                set_role(child.name)
                set_process_name(f"mpbroker-{SHORT_ROLES.get(child.role) or 'w' + str(child.slot)}")
                self._close_in_child(child)
                code = _profiled(target, child)
            except BaseException:
                log.exception("%s failed", child.name)
            finally:
                logging.shutdown()
                os._exit(code)
        child.pid = pid
        child.ready = False
        child.started = time.monotonic()
        child.started_ms = wall_clock_ms()  # a date: shown as the process's start time
        child.stop_deadline = None
        child.killed_silent = False
        self.slots.write(child.slot, pid=pid, state=SlotState.STARTING, generation=child.generation,
                         restarts=child.restarts, started_ms=child.started_ms)
        log.info("started %s (pid %d)", child.name, pid)

    def _close_in_child(self, child: Child) -> None:
        self.control_server.close_in_child()
        os.close(self._lock_fd)
        for other in self.children:
            other.channel.close()
            if other is not child:
                other.child_channel.close()
        if child.role != "acceptor":
            self.listener.close()
        if self.metrics_listener is not None and child.role != "metrics":
            self.metrics_listener.close()

    def _run_worker(self, child: Child) -> int:
        recover = not self.clean or child.restarts > 0
        worker = PartitionWorker(child.slot, self.config, self.request_rings[child.slot],
                                 self.answer_rings[child.slot], self.tables[child.slot], self.slots,
                                 child.child_channel, self.counters.row(child.slot), recover=recover)
        return worker.run()

    def _run_acceptor(self, child: Child) -> int:
        acceptor = Acceptor(self.config, self.listener, self.request_rings, self.answer_rings, self.tables,
                            self.slots, child.slot, child.child_channel, child.restarts,
                            self.counters.row(child.slot))
        child.child_channel.send("ready")
        return acceptor.run()

    def _run_registrar(self, child: Child) -> int:
        from mpbroker.registrar.registrar import Registrar  # kazoo: only in this process

        registrar = Registrar(self.config, self.port, self.tables, self.slots, child.slot, child.child_channel,
                              self.creator_id)
        return registrar.run()

    def _run_metrics(self, child: Child) -> int:
        from mpbroker.metrics.collector import BrokerCollector  # prometheus_client: only in this process
        from mpbroker.metrics.exporter import MetricsExporter

        processes = [(other.slot, other.name, other.role) for other in self.children]
        collector = BrokerCollector(self.config, self.tables, self.slots, self.counters, processes)
        return MetricsExporter(collector, self.metrics_listener, self.slots, child.slot, child.child_channel).run()

    def _spawn_registrar(self) -> None:
        self.registrar_checked = False
        self._fork(self.registrar, self._run_registrar)

    def _spawn_worker(self, child: Child) -> None:
        self.request_rings[child.slot].reset()
        self.answer_rings[child.slot].reset()
        self._fork(child, self._run_worker)

    def _spawn_acceptor(self) -> None:
        self._fork(self.acceptor, self._run_acceptor)

    def _spawn_metrics(self) -> None:
        self._fork(self.metrics, self._run_metrics)

    def _respawn(self, child: Child) -> None:
        if child.role == "worker":
            self._spawn_worker(child)
        else:
            {"acceptor": self._spawn_acceptor, "registrar": self._spawn_registrar,
             "metrics": self._spawn_metrics}[child.role]()

    # --- the loop ---------------------------------------------------------------

    def run(self) -> int:
        self._prepare()
        self.selector = selectors.DefaultSelector()
        wakeup_read, wakeup_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wakeup_write, warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, lambda signum, frame: None)  # the wake-up fd carries it
        self.selector.register(wakeup_read, selectors.EVENT_READ, "signal")
        self.control_server.attach(self.selector, self._run_command)
        for child in self.children:
            self.selector.register(child.channel.fileno(), selectors.EVENT_READ, child)
        log.info("mpbroker %d starting: %d workers, log.dir %s, %s", self.config.brokerid, len(self.workers),
                 self.config.log_dir, "clean shutdown last time" if self.clean else "recovering logs")
        if self.metrics:
            self._spawn_metrics()
        if self.registrar:  # the workers start once it checked the broker id
            self._spawn_registrar()
        else:
            self._start_workers()
        try:
            while self.phase != STOPPED:
                for key, events in self.selector.select(self._timeout()):
                    if key.data == "signal":
                        self._on_signals(os.read(wakeup_read, 512))
                    elif key.data == "ctl":
                        self.control_server.on_ready(key.fd, events)
                    else:
                        self._on_child_messages(key.data)
                self._reap()
                self._tick()
        finally:
            self._cleanup()
        return self.exit_code

    def _start_workers(self) -> None:
        for child in self.workers:
            self._spawn_worker(child)

    def _timeout(self) -> float:
        timeout = 0.1 if self.phase != RUNNING or any(c.respawn_at for c in self.children) else 1.0
        if self._ready_deadline is not None:  # READY=1 at the deadline, not up to a second later
            timeout = min(timeout, max(0.0, self._ready_deadline - time.monotonic()))
        if systemd.watchdog_interval_s():  # never sleep past the next WATCHDOG=1
            timeout = min(timeout, max(0.0, self._next_watchdog - time.monotonic()))
        return timeout

    def _on_signals(self, signals: bytes) -> None:
        for number in signals:
            if number == signal.SIGTERM:
                self.begin_stop("SIGTERM")
            elif number in (signal.SIGINT, signal.SIGQUIT):
                self._stop_fast(signal.Signals(number).name)
            elif number == signal.SIGHUP:
                self.reload()

    def _on_child_messages(self, child: Child) -> None:
        for message in child.channel.receive_all():
            if message is None:
                continue  # its end closes when it exits; SIGCHLD tells us
            op = message.get("op")
            if op == "ready":
                self._on_ready(child)
            elif child is self.registrar:
                self._on_registrar_message(op, message)
            elif op == "worker_down_ack" and child is self.acceptor:
                worker = self.workers[message["slot"]]
                if worker.awaiting_ack == message["generation"]:
                    worker.awaiting_ack = None
                    self._schedule_respawn(worker)

    def _on_registrar_message(self, op: str, message: dict) -> None:
        if op == "zk_state":
            self.zk_state = {key: value for key, value in message.items() if key != "op"}
            if self._ready_deadline is not None and self.zk_state.get("registered"):
                self._notify_ready(f"registered in ZooKeeper at {self.config.zk_connect} "
                                   f"as broker {self.config.brokerid}")
        elif op == "checked":
            self.registrar_checked = True
            self._zk_answered = bool(message.get("zookeeper"))
            if not self._zk_answered:
                log.warning("starting without ZooKeeper; the broker registers once it answers")
            if self.phase != RUNNING:
                return
            if all(worker.generation == 0 for worker in self.workers):
                self._start_workers()
            elif self._accepting:
                self.registrar.channel.send("register")

    def _on_ready(self, child: Child) -> None:
        child.ready = True
        self.slots.set_state(child.slot, SlotState.UP)
        if child.role in ("registrar", "metrics"):
            return
        if child.role == "acceptor":
            if not self._accepting:
                self._accepting = True
                self._on_first_accepting()
            return
        log.info("%s is up", child.name)
        if self.acceptor.alive:
            self.acceptor.channel.send("worker_up", slot=child.slot)
        elif self.phase == RUNNING and self.acceptor.generation == 0 and all(w.ready for w in self.workers):
            self._spawn_acceptor()  # the first start: every worker has opened its logs

    def _on_first_accepting(self) -> None:
        """The acceptor takes connections for the first time: ready now without
        ZooKeeper, else once registered (bounded: see the module docstring)."""
        if self.registrar is None:
            self._notify_ready("")
            return
        if self.registrar.alive and self.registrar_checked:
            self.registrar.channel.send("register")
        if self._zk_answered is False:
            self._notify_ready(f"not registered in ZooKeeper: {self.config.zk_connect} did not answer at start-up; "
                               "registering once it does")
            return
        timeout_ms = self.config.zk_connectiontimeout_ms
        self._ready_deadline = time.monotonic() + timeout_ms / 1000
        log.info("accepting on port %d; ready once registered in ZooKeeper (at most %d ms, "
                 "zk.connectiontimeout.ms)", self.port, timeout_ms)

    def _notify_ready(self, how: str) -> None:
        """Tell systemd (and the status) that the broker serves; ``how`` adds why now."""
        self._ready_deadline = None
        self._ready_notified = True
        detail = f"accepting on port {self.port}" + (f", {how}" if how else "")
        systemd.notify(f"READY=1\nMAINPID={self.pid}\nSTATUS={detail}")
        log.info("ready: %s", detail)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = next((c for c in self.children if c.pid == pid), None)
            if child is not None:
                self._on_exit(child, os.waitstatus_to_exitcode(status))

    def _on_exit(self, child: Child, code: int) -> None:
        lived = time.monotonic() - child.started
        was_ready = child.ready
        child.pid = 0
        child.ready = False
        child.last_exit = code
        self.slots.set_state(child.slot, SlotState.DOWN)
        if child is self.registrar:
            self.zk_state = None  # its last report died with it; the next registrar reports afresh
        how = f"exit code {code}" if code >= 0 else f"signal {signal.Signals(-code).name}"
        if self.phase != RUNNING:
            log.info("%s stopped (%s)", child.name, how)
            return
        died = f"{child.name} (pid gone) died: {how} after {lived:.1f}s"
        if child.role == "worker" and not was_ready and not self._ready_notified:
            log.error("%s", died)
            log.critical("%s could not open its logs; stopping the broker", child.name)
            self.exit_code = 1
            self.begin_stop("a worker failed to start")
            return
        if child.role == "registrar" and code == EXIT_ID_CONFLICT:
            log.error("%s", died)
            log.critical("broker id %d belongs to another live broker; stopping", self.config.brokerid)
            self.exit_code = 1
            self.begin_stop("broker id conflict")
            return
        young = lived < YOUNG_DEATH_S
        child.backoff = min(MAX_RESPAWN_BACKOFF_S, max(0.5, child.backoff * 2)) if young else 0.0
        if child.backoff:
            log.error("%s; respawning in %.1f s (back-off: it died within %.0f s of its start)",
                      died, child.backoff, YOUNG_DEATH_S)
        else:
            log.error("%s; respawning now", died)
        if child.role in ("registrar", "metrics"):  # nothing in flight to them: respawn after the back-off
            self._schedule_respawn(child)
            return
        if child.role == "acceptor":
            child.restarts += 1
            for worker in self.workers:  # the next acceptor reads the slot table instead
                if worker.awaiting_ack is not None:
                    worker.awaiting_ack = None
                    self._schedule_respawn(worker)
            child.respawn_at = time.monotonic() + child.backoff
            return
        if self.acceptor.alive:
            child.awaiting_ack = child.generation
            child.ack_deadline = time.monotonic() + ACK_TIMEOUT_S
            self.acceptor.channel.send("worker_down", slot=child.slot, generation=child.generation)
        else:
            self._schedule_respawn(child)

    def _schedule_respawn(self, child: Child) -> None:
        child.restarts += 1
        child.respawn_at = time.monotonic() + child.backoff

    def _tick(self) -> None:
        now = time.monotonic()
        if self.phase == RUNNING:
            if self._ready_deadline is not None and now >= self._ready_deadline:
                log.warning("not registered in ZooKeeper within %d ms (zk.connectiontimeout.ms); ready without it, "
                            "registering once ZooKeeper answers", self.config.zk_connectiontimeout_ms)
                self._notify_ready(f"not registered in ZooKeeper yet (none within "
                                   f"{self.config.zk_connectiontimeout_ms} ms)")
            for child in self.workers:
                if child.awaiting_ack is not None and now > child.ack_deadline:
                    log.warning("acceptor did not confirm %s's death in time; respawning anyway", child.name)
                    child.awaiting_ack = None
                    self._schedule_respawn(child)
            for child in self.children:
                if child.respawn_at is not None and now >= child.respawn_at:
                    child.respawn_at = None
                    self._respawn(child)
            self._check_heartbeats()
            self._sample_rates(now)
        else:
            self._advance_stop(now)
        self.control_server.tick(now)
        interval = systemd.watchdog_interval_s()
        if interval and now >= self._next_watchdog:
            systemd.notify("WATCHDOG=1")
            self._next_watchdog = now + interval

    def _check_heartbeats(self) -> None:
        now_ms = monotonic_ms()  # heartbeats are on the machine-wide monotonic clock
        limit = self.config.worker_heartbeat_timeout_ms
        for child in self.children:
            if not child.alive or not child.ready or child.killed_silent:
                continue  # one SIGKILL is enough: it stays pending until the process can die
            silent = now_ms - self.slots.read(child.slot).heartbeat_ms
            if silent > limit:
                log.error("%s (pid %d) sent no heartbeat for %d ms; killing it", child.name, child.pid, silent)
                child.killed_silent = True
                self._kill(child, signal.SIGKILL)

    @staticmethod
    def _kill(child: Child, sig: int) -> None:
        try:
            os.kill(child.pid, sig)
        except ProcessLookupError:
            pass

    # --- stop -------------------------------------------------------------------

    def begin_stop(self, why: str) -> None:
        if self.phase != RUNNING:
            return
        log.info("graceful stop (%s)", why)
        systemd.notify("STOPPING=1")
        self._ready_deadline = None
        self.phase = STOPPING_ACCEPTOR
        for child in self.children:
            child.respawn_at = None
            child.awaiting_ack = None
        if self.registrar and self.registrar.alive:  # out of ZooKeeper first: clients move on
            self.registrar.channel.send("stop")
            self.registrar.stop_deadline = time.monotonic() + REGISTRAR_STOP_TIMEOUT_S
        if self.metrics and self.metrics.alive:
            self.metrics.channel.send("stop")
            self.metrics.stop_deadline = time.monotonic() + METRICS_STOP_TIMEOUT_S
        if self.acceptor.alive:
            self.acceptor.channel.send("stop")
            self.acceptor.stop_deadline = time.monotonic() + ACCEPTOR_STOP_TIMEOUT_S

    def _advance_stop(self, now: float) -> None:
        if self.phase == STOPPING_ACCEPTOR:
            if self._kill_overdue([child for child in (self.acceptor, self.registrar, self.metrics) if child], now):
                return
            if all(worker.generation == 0 for worker in self.workers):  # stopped before the logs opened
                if self.clean:
                    write_marker(self.config.log_dir)  # put back what _prepare took
                self.phase = STOPPED
                return
            self.phase = STOPPING_WORKERS
            for child in self.workers:
                if child.alive:
                    child.channel.send("stop")
                    child.stop_deadline = now + WORKER_STOP_TIMEOUT_S
        if self.phase == STOPPING_WORKERS:
            if self._kill_overdue(self.workers, now):
                return
            clean = not self.fast and all(child.last_exit == 0 for child in self.workers)
            if clean:
                write_marker(self.config.log_dir)
                log.info("every log flushed and closed; clean-shutdown marker written")
            else:
                log.warning("not every worker stopped cleanly; the next start recovers the logs")
            self.phase = STOPPED

    def _kill_overdue(self, children, now: float) -> bool:
        """SIGKILL the stopping children past their deadline; True while any is alive."""
        alive = [child for child in children if child.alive]
        for child in alive:
            if now > child.stop_deadline:
                log.warning("%s did not stop in time; killing it", child.name)
                self._kill(child, signal.SIGKILL)
        return bool(alive)

    def _stop_fast(self, why: str) -> None:
        log.info("fast stop (%s)", why)
        systemd.notify("STOPPING=1")
        self._ready_deadline = None
        self.fast = True
        self.phase = STOPPING_WORKERS
        deadline = time.monotonic() + FAST_STOP_TIMEOUT_S
        for child in self.children:
            child.respawn_at = None
            if child.alive:  # the registrar takes TERM: deleting its nodes is quick
                self._kill(child, signal.SIGTERM if child is self.registrar else signal.SIGQUIT)
                child.stop_deadline = deadline
        self.acceptor.stop_deadline = deadline

    def _cleanup(self) -> None:
        for child in self.children:
            if child.alive:
                self._kill(child, signal.SIGKILL)
        self.control_server.close()
        self.listener.close()
        if self.metrics_listener is not None:
            self.metrics_listener.close()
        log.info("supervisor exiting (code %d)", self.exit_code)

    # --- reload -----------------------------------------------------------------

    def reload(self) -> dict:
        if self.config_path is None:
            return {"ok": False, "error": "started without a configuration file: nothing to reload"}
        notifying = self._ready_notified  # before READY=1, a reload must not announce readiness
        if notifying:
            systemd.reloading()
        try:
            new, warnings = load_config(self.config_path, self.overrides)
        except ConfigError as exc:
            log.error("reload refused, keeping the running configuration: %s", exc)
            if notifying:
                systemd.notify("READY=1")
            return {"ok": False, "error": str(exc)}
        for warning in warnings:
            log.warning("%s", warning)
        old_properties, new_properties = self.config.as_properties(), new.as_properties()
        changed = {key for key in new_properties if new_properties[key] != old_properties.get(key)}
        needs_restart = sorted(changed - RELOADABLE)
        if needs_restart:
            log.warning("reload: %s can only change with a restart; keeping the running values",
                        ", ".join(needs_restart))
        applied = {key: new_properties[key] for key in changed & RELOADABLE}
        self.config = self.config.with_overrides(applied)
        set_level(self.config.log_level)
        properties = self.config.as_properties()
        for child in self.children:
            if child.alive:
                child.channel.send("reload", properties=properties)
        log.info("reloaded: %s", ", ".join(sorted(applied)) or "nothing changed")
        if notifying:
            systemd.notify("READY=1")
        return {"ok": True, "applied": sorted(applied), "needs_restart": needs_restart}

    # --- status -----------------------------------------------------------------

    def _sample_rates(self, now: float) -> None:
        if now < self._next_rate_sample:
            return
        self._next_rate_sample = now + RATE_SAMPLE_S
        totals = {(topic, partition): state.messages_in
                  for topic, partition, _, state in published_partitions(self.tables)}
        self._rate_samples.append((now, totals))
        while self._rate_samples and now - self._rate_samples[0][0] > RATE_WINDOW_S:
            self._rate_samples.popleft()

    def _rate(self, key, current: int) -> float:
        if not self._rate_samples:
            return 0.0
        when, totals = self._rate_samples[0]
        span = time.monotonic() - when
        return (current - totals.get(key, 0)) / span if span > 0 else 0.0

    @staticmethod
    def _respawn_in_s(child: Child):
        """Seconds until a dead child is forked again, or None when no respawn is scheduled
        (alive, or stopping). A worker whose death the acceptor has not confirmed yet counts
        its back-off from now."""
        if child.respawn_at is not None:
            return round(max(0.0, child.respawn_at - time.monotonic()), 1)
        if child.awaiting_ack is not None:
            return round(child.backoff, 1)
        return None

    def status(self) -> dict:
        now_ms = monotonic_ms()
        rows = published_partitions(self.tables)
        by_worker = collections.Counter(slot for _, _, slot, _ in rows)

        def describe(child: Child) -> dict:
            slot = self.slots.read(child.slot)
            heartbeat = slot.heartbeat_ms
            return {
                "slot": child.slot, "pid": child.pid or None, "state": SlotState(slot.state).name.lower(),
                "restarts": child.restarts,
                "uptime_s": round(time.monotonic() - child.started, 1) if child.alive else 0,
                "heartbeat_age_ms": now_ms - heartbeat if heartbeat else None,
                "last_exit": child.last_exit,
                "respawn_in_s": self._respawn_in_s(child),
            }

        workers = []
        for child in self.workers:
            entry = describe(child)
            entry["partitions"] = by_worker.get(child.slot, 0)
            workers.append(entry)
        partitions = [{
            "topic": topic, "partition": partition, "worker": slot,
            "log_start": state.log_start, "log_end": state.log_end, "flushed_end": state.flushed_end,
            "segments": state.segment_count, "bytes": state.log_end - state.log_start,
            "messages_in": state.messages_in,
            "messages_per_s": round(self._rate((topic, partition), state.messages_in), 1),
        } for topic, partition, slot, state in sorted(rows, key=lambda row: (row[0], row[1]))]
        return {
            "ok": True, "pid": self.pid, "brokerid": self.config.brokerid, "port": self.port,
            "phase": self.phase, "ready": self._ready_notified and self.phase == RUNNING,
            "uptime_s": round(time.monotonic() - self._started_at, 1),
            "log_dir": self.config.log_dir, "workers": workers, "acceptor": describe(self.acceptor),
            "registrar": describe(self.registrar) if self.registrar else None,
            "zookeeper": self.zk_state if self.registrar else None,
            "zk_connect": self.config.zk_connect,  # for mpbroker-ctl groups, with or without the registrar
            "metrics": {**describe(self.metrics), "host": self.config.metrics_host,
                        "port": self.metrics_listener.getsockname()[1]} if self.metrics else None,
            "partitions": partitions,
        }

    def _run_command(self, request: dict) -> dict:
        command = request.get("command")
        if command == "status":
            return self.status()
        if command == "shutdown":
            self.begin_stop("mpbroker-ctl shutdown")
            return {"ok": True, "pid": self.pid}
        if command == "reload":
            return self.reload()
        return {"ok": False, "error": f"unknown command {command!r}"}


def _profiled(target, child: Child) -> int:
    """Run a child's main; under cProfile when $MPBROKER_PROFILE_DIR names a directory
    (stats land in ``<dir>/<role>-<pid>.prof`` when the child exits)."""
    directory = os.environ.get("MPBROKER_PROFILE_DIR")
    if not directory:
        return target(child)
    import cProfile

    profiler = cProfile.Profile()
    try:
        return profiler.runcall(target, child)
    finally:
        name = "acceptor" if child.role == "acceptor" else f"worker{child.slot}"
        profiler.dump_stats(os.path.join(directory, f"{name}-{os.getpid()}.prof"))


def serve(config_path: str, overrides=()) -> int:
    """``mpbroker serve``: load the configuration, run the supervisor until it stops."""
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
