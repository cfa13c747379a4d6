"""A private IPv4 network on this machine, and the faults made in it.

Owns the kernel objects and nothing else: a bridge in the root namespace holding the
gateway address ``10.<a>.<b>.1/24``, and per node a network namespace joined to the
bridge by a veth pair (``eth0`` inside, its own ``10.<a>.<b>.<n>``, ``lo`` up). Clients
(the test process, its ZooKeeper client) stay in the root namespace and reach every node
through the bridge from the gateway address. What runs inside a node is the caller's:
``Node.wrapper`` is the command prefix that starts a program there, ``Node.pids`` lists
what runs there.

Why namespaces and not ports on 127.0.0.1: a partition must cut one broker from another
while each keeps its own address, in both directions or in one, and the brokers must
not see a difference from separate machines (every process binds its own address,
connects from it, and may be cut from every peer without touching the others).

Names carry a tag (the pid, by default) so parallel runs do not clash, and stay within
the kernel's 15 characters: bridge ``mpb<tag>``, namespaces ``mpn<tag>-<node>``, host
ends of the veth pairs ``mpv<tag>x<n>``. The subnet is derived from the tag too
(``10.60.0.0``-``10.249.255.0``, the first /24 from there on that no route or address of
the root namespace overlaps). ``start`` first removes leftovers of a crashed run with
the same names, and those of any run whose pid is dead (namespaces with whatever runs
in them, links, the root namespace's blackhole routes into the bridge's subnet); ``close`` (the context
manager's exit, also after a failure) kills whatever still runs in the namespaces and
removes everything.

The faults (each reversible: ``heal()`` reverts them all, ``heal(fault)`` one of them):

- ``partition(a, b)``: no packet between a member of ``a`` and one of ``b``, either way.
  Made with blackhole routes, ``ip route add blackhole <peer>/32``, in each sender's
  namespace (for ``CLIENTS``, the root namespace's route to the node, and the node's
  route to the gateway address). A /32 is more specific than the bridge's connected
  /24, so the route lookup drops the packet before any neighbour (ARP) step: checked on
  this machine, a blackhole to an address on the same L2 segment drops the traffic.
  Route changes invalidate the routes cached in established sockets, so connections
  already open stall too. A sender's own side sees it at once: ``connect`` to a
  blackholed address fails with EINVAL (a real partition would time out), while the
  data of an established connection is silently lost and retransmitted.
- ``isolate(node)``: a partition of the node from every other node and the clients.
- ``drop_one_way(src, dst)``: only packets from ``src`` to ``dst`` are dropped (a
  blackhole route in ``src``'s namespace). What that means for TCP, which needs both
  directions: a connection ``src`` opens fails at once (EINVAL); one ``dst`` opens never
  completes (the SYN arrives, the SYN-ACK is dropped, ``dst`` times out); on an
  established connection ``src``'s data and ACKs are lost, so what ``dst`` sends does
  reach ``src``'s application, once, but ``dst`` never learns it and retransmits until
  it gives up, and what ``src`` sends stays in its send buffer. So over TCP a one-way
  drop stalls a connection both ways; only the bytes ``dst`` sends still arrive.
- ``link_down(node)`` / ``link_up(node)``: the host end of the node's veth pair is set
  down, so the node's ``eth0`` loses its carrier (a cable pulled): nothing in or out,
  its address and routes kept; new connections fail after the neighbour lookup.

Each fault method returns a ``NetworkFault``: the routes and links it took, for its own
``heal(fault)``. Faults may overlap (a schedule's step can hold two at once, each healed
at the end of its own hold), and two of them may take the same route or link (the
leader isolated while a one-way drop from it to a follower holds): every route and
link down counts the faults holding it and is restored when the last of them heals.
Why per-fault undo rather than healing everything once both faults end: the second
fault's hold and the end recorded for each fault in the history stay what they say,
so a checker or a reader lining up failures with faults is not misled by a fault that
silently outlived its heal.

Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2; ``NetworkUnavailable``
says loudly when the machine cannot make the network.
"""

import functools
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass

CLIENTS = "clients"  # the root namespace's processes, as a member of a fault's groups
_SUBNETS = 190 * 256  # 10.60.0.0/24 .. 10.249.255.0/24
_ROUTE_TYPES = {"local", "broadcast", "blackhole", "unreachable", "prohibit", "throw", "multicast", "anycast",
                "unicast", "nat"}
_NAMESPACE_RE = re.compile(r"^mpn(\d+)-")
_LINK_RE = re.compile(r"^mp(?:b(\d+)|v(\d+)x\d+)$")


class NetworkUnavailable(RuntimeError):
    """This machine cannot make network namespaces (not root, no iproute2, a kernel or
    container that refuses them)."""


class NetworkError(RuntimeError):
    """An ``ip`` command failed."""


def ip(*arguments, check: bool = True) -> str:
    result = subprocess.run(["ip", *arguments], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise NetworkError(f"ip {' '.join(arguments)}: exit {result.returncode}: {result.stderr.strip()}")
    return result.stdout


@dataclass(frozen=True)
class Node:
    name: str
    namespace: str
    address: str
    host_link: str  # the veth end on the bridge, in the root namespace

    @property
    def wrapper(self) -> list:
        """The command prefix that runs a program inside this node."""
        return ["ip", "netns", "exec", self.namespace]

    def pids(self) -> list:
        """Every process running inside this node."""
        return [int(pid) for pid in ip("netns", "pids", self.namespace, check=False).split()]

    def signal(self, sig: int) -> list:
        """Send ``sig`` to every process inside this node; the pids signalled."""
        pids = self.pids()
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        return pids

    def kill(self) -> list:
        """SIGKILL everything inside at once, as a crash of the machine would: every
        process is stopped first (until no new one appears), so none sees another die
        (a broker's children get a signal when their supervisor dies, and would stop
        gracefully: resign, delete their ZooKeeper nodes). The pids killed."""
        stopped = set()
        while True:
            fresh = set(self.pids()) - stopped
            if not fresh:
                break
            for pid in fresh:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except ProcessLookupError:
                    pass
            stopped |= fresh
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return sorted(stopped)


def _locked(method):
    @functools.wraps(method)
    def run(self, *arguments, **keywords):
        with self._lock:
            return method(self, *arguments, **keywords)
    return run


@dataclass(frozen=True)
class NetworkFault:
    """What one fault took: blocked (namespace or None, address) pairs and links down."""
    blocked: frozenset = frozenset()
    down: frozenset = frozenset()


class Network:
    def __init__(self, tag: str | None = None):
        self.tag = str(tag if tag is not None else os.getpid())
        self.bridge = f"mpb{self.tag}"
        self.subnet = None
        self.gateway = None
        self.nodes = {}  # name -> Node
        self._blocked = Counter()  # (namespace or None for the root namespace, address) -> faults holding it
        self._down = Counter()  # node name whose link is down -> faults holding it
        self._lock = threading.RLock()  # two overlapping faults are applied and healed from two threads
        self._started = False

    # --- life cycle -----------------------------------------------------------------

    def start(self) -> "Network":
        check_available()
        remove_leftovers(self.tag)
        self.subnet = choose_subnet(int(self.tag) if self.tag.isdigit() else hash(self.tag))
        self.gateway = str(self.subnet.network_address + 1)
        self._started = True
        try:
            ip("link", "add", self.bridge, "type", "bridge")
            ip("addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
            ip("link", "set", self.bridge, "up")
        except BaseException:
            self.close()
            raise
        return self

    def add_node(self, name: str) -> Node:
        if not re.fullmatch(r"[a-z0-9]{1,6}", name) or name == CLIENTS or name in self.nodes:
            raise ValueError(f"bad or taken node name {name!r} (1-6 of [a-z0-9])")
        index = len(self.nodes) + 2
        node = Node(name, f"mpn{self.tag}-{name}", str(self.subnet.network_address + index),
                    f"mpv{self.tag}x{index}")
        self.nodes[name] = node
        ip("netns", "add", node.namespace)
        ip("link", "add", node.host_link, "type", "veth", "peer", "name", "eth0", "netns", node.namespace)
        ip("link", "set", node.host_link, "master", self.bridge, "up")
        ip("-n", node.namespace, "addr", "add", f"{node.address}/{self.subnet.prefixlen}", "dev", "eth0")
        ip("-n", node.namespace, "link", "set", "eth0", "up")
        ip("-n", node.namespace, "link", "set", "lo", "up")
        return node

    def close(self) -> None:
        """Remove every route, namespace and link of this network (killing what still
        runs inside a node)."""
        if not self._started:
            return
        for key in list(self._blocked):
            self._unblock(key)
        self._down.clear()
        for node in self.nodes.values():
            _remove_namespace(node.namespace)
        self.nodes.clear()
        ip("link", "del", self.bridge, check=False)
        self._started = False

    def __enter__(self) -> "Network":
        return self if self._started else self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # --- faults ---------------------------------------------------------------------

    @_locked
    def partition(self, group_a, group_b) -> NetworkFault:
        """No packets between any member of ``group_a`` and any of ``group_b``, both ways.
        Members are nodes, node names or ``CLIENTS``."""
        first, second = self._names(group_a), self._names(group_b)
        if first & second:
            raise ValueError(f"{sorted(first & second)} in both groups")
        taken = []
        for a in first:
            for b in second:
                taken += [self._block(a, b), self._block(b, a)]
        return NetworkFault(blocked=frozenset(taken))

    def isolate(self, node) -> NetworkFault:
        """Cut ``node`` from every other node and from the clients."""
        (name,) = self._names([node])
        return self.partition([name], [other for other in [*self.nodes, CLIENTS] if other != name])

    @_locked
    def drop_one_way(self, src, dst) -> NetworkFault:
        """Drop only the packets from ``src`` to ``dst`` (see the module docstring for TCP)."""
        (a,), (b,) = self._names([src]), self._names([dst])
        if a == b:
            raise ValueError("src and dst are the same")
        return NetworkFault(blocked=frozenset([self._block(a, b)]))

    @_locked
    def link_down(self, node) -> NetworkFault:
        (name,) = self._names([node])
        if name == CLIENTS:
            raise ValueError("the clients have no link of their own: partition them instead")
        if not self._down[name]:
            ip("link", "set", self.nodes[name].host_link, "down")
        self._down[name] += 1
        return NetworkFault(down=frozenset([name]))

    @_locked
    def link_up(self, node) -> None:
        """The node's link up, whatever fault took it down."""
        (name,) = self._names([node])
        ip("link", "set", self.nodes[name].host_link, "up")
        del self._down[name]

    @_locked
    def heal(self, fault: NetworkFault | None = None) -> None:
        """Revert ``fault`` (what no other fault still holds), or every fault: all
        blackhole routes removed, every link up."""
        if fault is None:
            for key in list(self._blocked):
                self._unblock(key)
            for name in list(self._down):
                self.link_up(name)
            return
        for key in fault.blocked:
            if key in self._blocked:  # not healed already by a heal of everything
                self._blocked[key] -= 1
                if not self._blocked[key]:
                    self._unblock(key)
        for name in fault.down:
            if name in self._down:
                self._down[name] -= 1
                if not self._down[name]:
                    self.link_up(name)

    def faults(self) -> dict:
        """What is in force: ``{"blocked": [(from, to address)], "down": [node names]}``."""
        return {"blocked": sorted((ns or "root", address) for ns, address in self._blocked),
                "down": sorted(self._down)}

    def _names(self, members) -> set:
        names = set()
        for member in members:
            name = member.name if isinstance(member, Node) else member
            if name != CLIENTS and name not in self.nodes:
                raise ValueError(f"no node {name!r} in this network")
            names.add(name)
        return names

    def _place(self, name: str) -> tuple:
        """(namespace or None, address) of a member."""
        if name == CLIENTS:
            return None, self.gateway
        return self.nodes[name].namespace, self.nodes[name].address

    def _block(self, src: str, dst: str) -> tuple:
        """Block ``src`` -> ``dst`` (once more, if another fault blocks it already): the key."""
        key = (self._place(src)[0], self._place(dst)[1])
        if not self._blocked[key]:
            ip(*_in(key[0]), "route", "add", "blackhole", f"{key[1]}/32")
        self._blocked[key] += 1
        return key

    def _unblock(self, key: tuple) -> None:
        ip(*_in(key[0]), "route", "del", "blackhole", f"{key[1]}/32", check=False)
        del self._blocked[key]


def _in(namespace) -> tuple:
    return ("-n", namespace) if namespace else ()


def check_available() -> None:
    """Raise NetworkUnavailable unless this process can make namespaces and links."""
    if shutil.which("ip") is None:
        raise NetworkUnavailable("iproute2's `ip` is not installed: network namespaces cannot be made")
    probe = f"mpn{os.getpid()}-probe"
    result = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        who = "" if os.geteuid() == 0 else f" (not root: uid {os.geteuid()}; namespaces need root)"
        raise NetworkUnavailable(f"`ip netns add` fails here{who}: {result.stderr.strip()}")
    ip("netns", "del", probe, check=False)


def choose_subnet(seed: int) -> ipaddress.IPv4Network:
    """The first /24 of 10.60-249.x from one the seed picks that nothing in the root
    namespace overlaps (another run's bridge included)."""
    used = _used_networks()
    for step in range(_SUBNETS):
        index = (seed + step) % _SUBNETS
        candidate = ipaddress.IPv4Network(f"10.{60 + index // 256}.{index % 256}.0/24")
        if not any(candidate.overlaps(network) for network in used):
            return candidate
    raise NetworkUnavailable("no free /24 in 10.60.0.0-10.249.255.0")


def _used_networks() -> list:
    used = []
    for line in ip("-4", "route", "show", "table", "all").splitlines() + \
            [line.split()[3] for line in ip("-o", "-4", "addr", "show").splitlines() if len(line.split()) > 3]:
        words = line.split()
        if not words:
            continue
        word = words[1] if words[0] in _ROUTE_TYPES and len(words) > 1 else words[0]
        try:
            network = ipaddress.ip_network(word, strict=False)
        except ValueError:
            continue  # "default" and the like
        if network.prefixlen > 0:
            used.append(network)
    return used


def remove_leftovers(tag: str) -> list:
    """Remove namespaces and links named for ``tag`` (a crashed run with the same names)
    or for a pid that is not running any more; the names removed."""
    removed = []
    for line in ip("netns", "list", check=False).splitlines():
        name = line.split()[0] if line.split() else ""
        match = _NAMESPACE_RE.match(name)
        if match and _stale(match.group(1), tag):
            _remove_namespace(name)
            removed.append(name)
    for line in ip("-o", "link", "show", check=False).splitlines():
        parts = line.split(":", 2)
        name = parts[1].strip().split("@")[0] if len(parts) > 1 else ""
        match = _LINK_RE.match(name)
        if match and _stale(match.group(1) or match.group(2), tag):
            if match.group(1):  # a bridge: the clients' blackhole routes into its subnet go too
                removed += _remove_blackholes(name)
            ip("link", "del", name, check=False)
            removed.append(name)
    return removed


def _remove_blackholes(bridge: str) -> list:
    """Delete the root namespace's blackhole routes into ``bridge``'s subnet."""
    networks = [ipaddress.ip_interface(line.split()[3]).network
                for line in ip("-o", "-4", "addr", "show", "dev", bridge, check=False).splitlines()
                if len(line.split()) > 3]
    removed = []
    for line in ip("-4", "route", "show", "type", "blackhole", check=False).splitlines():
        words = line.split()
        target = words[1] if words and words[0] == "blackhole" and len(words) > 1 else ""
        try:
            address = ipaddress.ip_network(target, strict=False)
        except ValueError:
            continue
        if any(address.subnet_of(network) for network in networks):
            ip("route", "del", "blackhole", str(address), check=False)
            removed.append(f"blackhole {address}")
    return removed


def _stale(owner: str, tag: str) -> bool:
    if owner == tag:
        return True
    try:
        os.kill(int(owner), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError, OverflowError):
        return False
    return False


def _remove_namespace(namespace: str) -> None:
    """SIGKILL whatever runs inside, delete its links (a namespace's veth ends go only
    when the namespace itself is gone, asynchronously), then the namespace."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pids = [int(pid) for pid in ip("netns", "pids", namespace, check=False).split()]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    for line in ip("-n", namespace, "-o", "link", "show", check=False).splitlines():
        parts = line.split(":", 2)
        name = parts[1].strip().split("@")[0] if len(parts) > 1 else ""
        if name and name != "lo":
            ip("-n", namespace, "link", "del", name, check=False)
    ip("netns", "del", namespace, check=False)
