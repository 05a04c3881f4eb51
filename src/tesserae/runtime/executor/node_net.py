"""A node's network for its jobs: the interface that carries its Ray address (for ``GLOO_SOCKET_IFNAME``/
``NCCL_SOCKET_IFNAME``), and a free port for ``MASTER_PORT`` (from a range a firewall can open).

Left to themselves, gloo and NCCL pick an address from the host name, and where the host name
resolves to loopback (Debian's usual ``127.0.1.1 hostname`` line) a multi-node job fails to connect
(``Gloo connectFullMesh failed ... remote=[127.0.1.1]``). The Ray executor knows each node's Ray
address, so each node's agent finds the interface that carries it (``getifaddrs``, as gloo itself
lists interfaces) and gives it to the job unless the job sets its own.

Standard library only (``ctypes`` over libc's ``getifaddrs``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import ipaddress
import random
import socket

#: The variables that name the interface, and the libraries that read them.
IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


class _IfAddrs(ctypes.Structure):
    pass


_IfAddrs._fields_ = [("ifa_next", ctypes.POINTER(_IfAddrs)), ("ifa_name", ctypes.c_char_p),
                     ("ifa_flags", ctypes.c_uint), ("ifa_addr", ctypes.c_void_p), ("ifa_netmask", ctypes.c_void_p),
                     ("ifa_ifu", ctypes.c_void_p), ("ifa_data", ctypes.c_void_p)]


def _address(sockaddr: int | None) -> str | None:
    """The IP address in a ``struct sockaddr`` (IPv4 or IPv6), else None."""
    if not sockaddr:
        return None
    family = ctypes.c_ushort.from_address(sockaddr).value
    if family == socket.AF_INET:
        return socket.inet_ntop(socket.AF_INET, ctypes.string_at(sockaddr + 4, 4))
    if family == socket.AF_INET6:
        return socket.inet_ntop(socket.AF_INET6, ctypes.string_at(sockaddr + 8, 16))
    return None


def addresses() -> list[tuple[str, str]]:
    """Every (interface, IP address) of this machine; empty where ``getifaddrs`` is not available."""
    name = ctypes.util.find_library("c")
    if name is None:
        return []
    libc = ctypes.CDLL(name, use_errno=True)
    head = ctypes.POINTER(_IfAddrs)()
    if libc.getifaddrs(ctypes.byref(head)) != 0:
        return []
    out = []
    try:
        node = head
        while node:
            entry = node.contents
            addr = _address(entry.ifa_addr)
            if addr is not None and entry.ifa_name:
                out.append((entry.ifa_name.decode(errors="replace"), addr))
            node = entry.ifa_next
    finally:
        libc.freeifaddrs(head)
    return out


def interface_of(ip: str) -> str | None:
    """The interface that carries ``ip`` here (None: no interface does, or ``ip`` is not an address)."""
    try:
        wanted = ipaddress.ip_address(ip)
    except ValueError:
        return None
    for name, addr in addresses():
        with contextlib.suppress(ValueError):
            if ipaddress.ip_address(addr.split("%", 1)[0]) == wanted:
                return name
    return None


def interface_env(ip: str, *, already: dict[str, str]) -> dict[str, str]:
    """``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME`` for the interface carrying ``ip``, but for those
    ``already`` sets (the job's own, or the node's passed on): empty when no interface carries it."""
    iface = interface_of(ip)
    if iface is None:
        return {}
    return {k: iface for k in IFNAME_VARS if k not in already}


def parse_ports(text: str) -> tuple[int, int]:
    """``LOW-HIGH`` (1024 <= LOW <= HIGH <= 65535) as a pair; ValueError saying what is wrong."""
    low, sep, high = text.partition("-")
    if not sep or not low.strip().isdigit() or not high.strip().isdigit():
        raise ValueError(f"'{text}' is not a port range LOW-HIGH (e.g. 29500-29599)")
    lo, hi = int(low), int(high)
    if not 1024 <= lo <= hi <= 65535:
        raise ValueError(f"'{text}': the range must lie within 1024-65535, LOW first")
    return lo, hi


def free_port(ports: tuple[int, int] | None = None) -> int | None:
    """A TCP port free here now: any (the kernel's ephemeral range), or one of ``ports`` (tried in random
    order; None when none is free)."""
    if ports is None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            return int(s.getsockname()[1])
    candidates = list(range(ports[0], ports[1] + 1))
    random.shuffle(candidates)
    for port in candidates:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return port
    return None
