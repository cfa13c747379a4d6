"""The supervisor: the one place where the broker's processes are made, watched and
stopped (gunicorn's arbiter is the model). Lifecycle only: what it keeps beside it
(the checks before a start, the listening sockets, readiness, the reload policy, the
control messages it only relays between children, the status, profiling) is in
``mpbroker.supervision``; what each child runs on is in ``mpbroker.process``.

It loads nothing itself but the configuration; before forking it makes everything
the children share (the listening socket, the shared-memory rings and tables, the
control channels), so a respawned child inherits the same ones. Whatever can stop a
start is found then and reported as one StartupError line (``supervision.preflight``);
the clean-shutdown marker is taken last, so a failed start leaves it. It then forks
the partition workers, waits until each has opened its logs, forks the acceptor and
tells systemd it is ready (``supervision.readiness``). Its loop only reacts: signals
arrive through a wake-up fd, children through their control channels and SIGCHLD,
``mpbroker-ctl`` through the control socket (``control_server``: non-blocking clients
in the same selector, so none can hold the loop), plus once-a-second checks
(heartbeats, respawn back-off, control deadlines).

A worker that dies is respawned in the same slot with the same partitions, after the
acceptor has failed what was in flight to it (the ``worker_down`` handshake) and
the supervisor has emptied that worker's rings. The acceptor is respawned at once.
A child that dies within YOUNG_DEATH_S of its start waits a back-off that doubles
with each such death (at most MAX_RESPAWN_BACKOFF_S, ``supervision.children``); the
log line of the death and the status (``respawn_in_s``) say how long.

What it tells systemd, and when, is in ``mpbroker.systemd``; the loop never sleeps
past the next WATCHDOG=1.

Signals: TERM (or ``mpbroker-ctl shutdown``) stops gracefully: the acceptor first
(no new requests, in-flight ones answered), then the workers (flush, close); when
every worker stopped cleanly the clean-shutdown marker is written. INT and QUIT stop
fast (no flush, no marker: the next start recovers). HUP reloads the configuration
file and hands the settings that can change at run time to the children
(``supervision.reload_policy``).
"""

import logging
import os
import selectors
import signal
import time

from mpbroker import systemd
from mpbroker.clock import monotonic_ms
from mpbroker.config.errors import ConfigError
from mpbroker.control_server import ControlServer
from mpbroker.ipc.control import Op
from mpbroker.ipc.shared_memory import SharedMemory
from mpbroker.ipc.slot_table import SlotState
from mpbroker.logging_setup import set_level, set_role
from mpbroker.process import scheduling
from mpbroker.process.fork import die_with_parent, reset_signals, set_process_name
from mpbroker.registrar import EXIT_ID_CONFLICT
from mpbroker.registry import layout
from mpbroker.segments import topic_deletion
from mpbroker.segments.clean_shutdown import take_marker, write_marker
from mpbroker.supervision import listeners, preflight
from mpbroker.supervision.child_mains import MAINS
from mpbroker.supervision.children import YOUNG_DEATH_S, Child, kill_overdue, make_children
from mpbroker.supervision.preflight import StartupError, start_step
from mpbroker.supervision.profiling import profiled
from mpbroker.supervision.readiness import Readiness
from mpbroker.supervision.relay import TO_REGISTRAR, Relay
from mpbroker.supervision.reload_policy import reload_config
from mpbroker.supervision.status import RateSampler, broker_status

log = logging.getLogger(__name__)

ACK_TIMEOUT_S = 2.0
FAST_STOP_TIMEOUT_S = 5.0
RUNNING, STOPPING_ACCEPTOR, STOPPING_WORKERS, STOPPED = "running", "stopping acceptor", "stopping workers", "stopped"


class Supervisor:
    def __init__(self, config, config_path: str | None = None, overrides=()):
        self.config = config
        self.config_path = config_path
        self.overrides = list(overrides)
        self.pid = os.getpid()
        self.phase = RUNNING
        self.fast = False
        self.exit_code = 0
        self.started_at = time.monotonic()
        self.readiness = None  # made once the port is known
        self.registrar_checked = False  # the registrar checked the broker id (or ZooKeeper was away)
        self.zk_state = None  # the registrar's last report
        self.scheduling = None  # the CPU scheduling policy the broker runs under, once it runs
        self.rates = RateSampler()
        self._accepting = False  # the first acceptor took connections
        self._watchdog = systemd.Watchdog()

    # --- start ------------------------------------------------------------------

    def _prepare(self) -> None:
        """Everything that can stop a start, each failure a StartupError saying what. The
        clean-shutdown marker is taken last: a start that fails leaves it for the next."""
        preflight.check_machine()
        config = self.config
        preflight.raise_file_limit()
        self._lock_fd = preflight.open_log_dir(config.log_dir)
        with start_step(f"cannot finish the topic deletions a stop interrupted in log.dir {config.log_dir}"):
            topic_deletion.finish_pending(config.log_dir)  # before any worker opens a log
        with start_step("cannot make the shared-memory rings and tables"):
            self.memory = SharedMemory(config.num_workers, config.ring_buffer_bytes,
                                       group_snapshot=config.metrics_enable and config.kafka_port >= 0)
            self.workers, self.acceptor, self.registrar, self.metrics = make_children(config)
        self.relay = Relay(self.workers, self.acceptor, self.registrar)  # roles, cluster, deletions
        self.slots = self.memory.slots
        self.children = [child for child in (*self.workers, self.acceptor, self.registrar, self.metrics) if child]
        preflight.check_file_limit(config)
        self.creator_id = layout.creator_id()  # the same for every registrar this supervisor starts
        self.listeners = listeners.Listeners(config, metrics=self.metrics is not None)
        self.port, self.kafka_port = self.listeners.port, self.listeners.kafka_port
        self.readiness = Readiness(config, self.pid, self.port)
        try:
            self.control_server = ControlServer(config.control_socket_path, config.control_socket_group)
        except OSError as exc:
            raise StartupError(f"cannot create the control socket {config.control_socket_path}: {exc}") from exc
        except Exception as exc:
            raise StartupError(str(exc)) from exc
        try:
            with start_step(f"cannot take the clean-shutdown marker in log.dir {config.log_dir}"):
                self.clean = take_marker(config.log_dir)
        except StartupError:
            self.control_server.close()
            raise

    @property
    def ready(self) -> bool:
        return self.readiness is not None and self.readiness.notified and self.phase == RUNNING

    # --- children ---------------------------------------------------------------

    def _fork(self, child: Child) -> None:
        child.generation += 1
        self.slots.beat(child.slot, monotonic_ms())  # the child beats from here on
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                reset_signals()
                die_with_parent(self.pid)
                set_role(child.name)
                set_process_name(child.process_name)
                self._close_in_child(child)
                code = profiled(MAINS[child.role], self, child)
            except BaseException:
                log.exception("%s failed", child.name)
            finally:
                logging.shutdown()
                os._exit(code)
        child.forked(pid)
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
        self.listeners.close_in_child(child.role)

    def _spawn(self, child: Child) -> None:
        if child.role == "worker":
            self.memory.reset_worker_rings(child.slot)
        elif child.role == "registrar":
            self.registrar_checked = False
        self._fork(child)

    # --- the loop ---------------------------------------------------------------

    def run(self) -> int:
        self._prepare()
        # Before any child or thread: they all inherit it (mpbroker.process.scheduling).
        self.scheduling = scheduling.apply(self.config.sched_batch)
        self.selector = selectors.DefaultSelector()
        wakeup_read, wakeup_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wakeup_write, warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, lambda signum, frame: None)  # the wake-up fd carries it
        self.selector.register(wakeup_read, selectors.EVENT_READ, "signal")
        self.control_server.attach(self.selector, self._run_command)
        for child in self.children:
            self.selector.register(child.channel.fileno(), selectors.EVENT_READ, child)
        log.info("mpbroker %d starting: %d workers, log.dir %s, %s, scheduling policy %s", self.config.brokerid,
                 len(self.workers), self.config.log_dir,
                 "clean shutdown last time" if self.clean else "recovering logs", self.scheduling)
        if self.metrics:
            self._spawn(self.metrics)
        if self.registrar:  # the workers start once it checked the broker id
            self._spawn(self.registrar)
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
            self._spawn(child)

    def _timeout(self) -> float:
        timeout = 0.1 if self.phase != RUNNING or any(c.respawn_at for c in self.children) else 1.0
        if self.readiness.deadline is not None:  # READY=1 at the deadline, not up to a second later
            timeout = min(timeout, max(0.0, self.readiness.deadline - time.monotonic()))
        return min(timeout, self._watchdog.seconds_left(time.monotonic()))  # never sleep past WATCHDOG=1

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
            if op == Op.READY:
                self._on_ready(child)
            elif child is self.registrar:
                if not self.relay.from_registrar(op, message):
                    self._on_registrar_message(op, message)
            elif op in TO_REGISTRAR:  # for ZooKeeper
                self.relay.to_registrar(op, message)
            elif op == Op.WORKER_DOWN_ACK and child is self.acceptor:
                worker = self.workers[message["slot"]]
                if worker.awaiting_ack == message["generation"]:
                    worker.awaiting_ack = None
                    worker.schedule_respawn()

    def _on_registrar_message(self, op: str, message: dict) -> None:
        """What the registrar reports about itself (the rest it sends is relayed)."""
        if op == Op.ZK_STATE:
            self.zk_state = {key: value for key, value in message.items() if key != "op"}
            self.readiness.registrar_reported(bool(self.zk_state.get("registered")))
        elif op == Op.CHECKED:
            self.registrar_checked = True
            self.readiness.zk_answered = bool(message.get("zookeeper"))
            if not self.readiness.zk_answered:
                log.warning("starting without ZooKeeper; the broker registers once it answers")
            if self.phase != RUNNING:
                return
            if all(worker.generation == 0 for worker in self.workers):
                self._start_workers()
            elif self._accepting:
                self.registrar.channel.send(Op.REGISTER)

    def _on_ready(self, child: Child) -> None:
        child.ready = True
        self.slots.set_state(child.slot, SlotState.UP)
        if child.role in ("registrar", "metrics"):
            return
        if child.role == "acceptor":
            self.relay.acceptor_ready()
            if not self._accepting:
                self._accepting = True
                self._on_first_accepting()
            return
        log.info("%s is up", child.name)
        self.relay.worker_ready(child)
        if self.acceptor.alive:
            self.acceptor.channel.send(Op.WORKER_UP, slot=child.slot)
        elif self.phase == RUNNING and self.acceptor.generation == 0 and all(w.ready for w in self.workers):
            self._spawn(self.acceptor)  # the first start: every worker has opened its logs

    def _on_first_accepting(self) -> None:
        if self.registrar is not None and self.registrar.alive and self.registrar_checked:
            self.registrar.channel.send(Op.REGISTER)
        self.readiness.accepting(with_registrar=self.registrar is not None)

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
        was_ready = child.ready
        lived = child.exited(code)
        self.slots.set_state(child.slot, SlotState.DOWN)
        if child is self.registrar:
            self.zk_state = None  # its last report died with it; the next registrar reports afresh
        how = f"exit code {code}" if code >= 0 else f"signal {signal.Signals(-code).name}"
        if self.phase != RUNNING:
            log.info("%s stopped (%s)", child.name, how)
            return
        died = f"{child.name} (pid gone) died: {how} after {lived:.1f}s"
        if child.role == "worker" and not was_ready and not self.readiness.notified:
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
        child.died(lived)
        if child.backoff:
            log.error("%s; respawning in %.1f s (back-off: it died within %.0f s of its start)",
                      died, child.backoff, YOUNG_DEATH_S)
        else:
            log.error("%s; respawning now", died)
        if child.role in ("registrar", "metrics"):  # nothing in flight to them: respawn after the back-off
            child.schedule_respawn()
            return
        if child.role == "acceptor":
            child.restarts += 1
            for worker in self.workers:  # the next acceptor reads the slot table instead
                if worker.awaiting_ack is not None:
                    worker.awaiting_ack = None
                    worker.schedule_respawn()
            child.respawn_at = time.monotonic() + child.backoff
            return
        if self.acceptor.alive:
            child.awaiting_ack = child.generation
            child.ack_deadline = time.monotonic() + ACK_TIMEOUT_S
            self.acceptor.channel.send(Op.WORKER_DOWN, slot=child.slot, generation=child.generation)
        else:
            child.schedule_respawn()

    def _tick(self) -> None:
        now = time.monotonic()
        if self.phase == RUNNING:
            self.readiness.tick(now)
            for child in self.workers:
                if child.awaiting_ack is not None and now > child.ack_deadline:
                    log.warning("acceptor did not confirm %s's death in time; respawning anyway", child.name)
                    child.awaiting_ack = None
                    child.schedule_respawn()
            for child in self.children:
                if child.respawn_at is not None and now >= child.respawn_at:
                    child.respawn_at = None
                    self._spawn(child)
            self._check_heartbeats()
            self.rates.sample(now, self.memory.tables)
        else:
            self._advance_stop(now)
        self.control_server.tick(now)
        self._watchdog.tick(now)

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
                child.kill(signal.SIGKILL)

    # --- stop -------------------------------------------------------------------

    def begin_stop(self, why: str) -> None:
        if self.phase != RUNNING:
            return
        log.info("graceful stop (%s)", why)
        systemd.notify("STOPPING=1")
        self.readiness.stopping()
        self.phase = STOPPING_ACCEPTOR
        for child in self.children:
            child.respawn_at = None
            child.awaiting_ack = None
        for child in (self.registrar, self.metrics, self.acceptor):  # out of ZooKeeper first: clients move on
            if child and child.alive:
                child.ask_to_stop()

    def _advance_stop(self, now: float) -> None:
        if self.phase == STOPPING_ACCEPTOR:
            if kill_overdue([child for child in (self.acceptor, self.registrar, self.metrics) if child], now):
                return
            if all(worker.generation == 0 for worker in self.workers):  # stopped before the logs opened
                if self.clean:
                    write_marker(self.config.log_dir)  # put back what _prepare took
                self.phase = STOPPED
                return
            self.phase = STOPPING_WORKERS
            for child in self.workers:
                if child.alive:
                    child.ask_to_stop()
        if self.phase == STOPPING_WORKERS:
            if kill_overdue(self.workers, now):
                return
            clean = not self.fast and all(child.last_exit == 0 for child in self.workers)
            if clean:
                write_marker(self.config.log_dir)
                log.info("every log flushed and closed; clean-shutdown marker written")
            else:
                log.warning("not every worker stopped cleanly; the next start recovers the logs")
            self.phase = STOPPED

    def _stop_fast(self, why: str) -> None:
        log.info("fast stop (%s)", why)
        systemd.notify("STOPPING=1")
        self.readiness.stopping()
        self.fast = True
        self.phase = STOPPING_WORKERS
        deadline = time.monotonic() + FAST_STOP_TIMEOUT_S
        for child in self.children:
            child.respawn_at = None
            if child.alive:  # the registrar takes TERM: deleting its nodes is quick
                child.kill(signal.SIGTERM if child is self.registrar else signal.SIGQUIT)
                child.stop_deadline = deadline
        self.acceptor.stop_deadline = deadline

    def _cleanup(self) -> None:
        for child in self.children:
            if child.alive:
                child.kill(signal.SIGKILL)
        self.control_server.close()
        self.listeners.close()
        log.info("supervisor exiting (code %d)", self.exit_code)

    # --- reload -----------------------------------------------------------------

    def reload(self) -> dict:
        if self.config_path is None:
            return {"ok": False, "error": "started without a configuration file: nothing to reload"}
        notifying = self.readiness.notified  # before READY=1, a reload must not announce readiness
        if notifying:
            systemd.reloading()
        try:
            self.config, plan = reload_config(self.config, self.config_path, self.overrides)
        except ConfigError as exc:
            log.error("reload refused, keeping the running configuration: %s", exc)
            answer = {"ok": False, "error": str(exc)}
        else:
            set_level(self.config.log_level)
            properties = self.config.as_properties()
            for child in self.children:
                if child.alive:
                    child.channel.send(Op.RELOAD, properties=properties)
            applied = sorted(plan.applied)
            log.info("reloaded: %s", ", ".join(applied) or "nothing changed")
            answer = {"ok": True, "applied": applied, "needs_restart": plan.needs_restart}
        if notifying:
            systemd.notify("READY=1")
        return answer

    def _run_command(self, request: dict) -> dict:
        command = request.get("command")
        if command == "status":
            return broker_status(self)
        if command == "shutdown":
            self.begin_stop("mpbroker-ctl shutdown")
            return {"ok": True, "pid": self.pid}
        if command == "reload":
            return self.reload()
        return {"ok": False, "error": f"unknown command {command!r}"}

