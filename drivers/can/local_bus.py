"""A CAN bus between processes of this machine only: python-can's ``udp_multicast`` on an interface-local group.

An IPv6 multicast group of interface-local scope (``ff01::/16``, ``ff11::/16``, ...: scope nibble 1) stays on the
host: Linux hands a datagram sent to it to the local members and drops it before it reaches a non-loopback
device, and drops such a datagram arriving from one (RFC 4291 2.7). So a controller needs nothing but stock
python-can::

    can.Bus(interface="udp_multicast", channel="ff11::fe5:c")

The stock bus binds the wildcard address, so it also takes unicast datagrams that another host sends to its
port. The service's side, :class:`HostLocalUdpMulticastBus`, speaks the same wire format but binds the group
address on the interface the kernel uses for the group: only datagrams sent to the group, hence only this
host's, reach it.
"""
from __future__ import annotations

import ipaddress
import os
import select
import socket
import struct
import time

import can
from can.interfaces.udp_multicast.utils import pack_message, unpack_message

#: The default group of the hardware-free CAN setup (configs/can.toml, examples/can_controller.py).
HOST_LOCAL_GROUP = "ff11::fe5:c"
#: python-can's udp_multicast port.
DEFAULT_PORT = 43113
#: Larger than any packed CAN FD frame.
_MAX_DATAGRAM = 4096
_PROBE_TIMEOUT_S = 1.0


def is_host_local_group(channel) -> bool:
    """True if ``channel`` is an IPv6 multicast group of interface-local scope (never leaves the host)."""
    try:
        address = ipaddress.IPv6Address(str(channel))
    except ValueError:
        return False
    return address.is_multicast and (int(address) >> 112) & 0xF == 1


def host_local_group(suffix: int) -> str:
    """An interface-local group distinct per ``suffix`` (0..0xFFFF), e.g. one per test or measurement."""
    return f"ff11::fe5:{suffix & 0xFFFF:x}"


def _join_request(group: str, ifindex: int) -> bytes:
    return socket.inet_pton(socket.AF_INET6, group) + struct.pack("@I", ifindex)


def group_interface(group: str) -> int:
    """Index of the interface the kernel joins and sends ``group`` on, i.e. where a stock bus meets us.

    Found by sending a datagram to the group from a probe socket and reading the interface it arrived on.
    """
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as probe:
        probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVPKTINFO, 1)
        probe.bind(("::", 0))
        probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP, _join_request(group, 0))
        token = os.urandom(16)
        probe.sendto(token, (group, probe.getsockname()[1]))
        deadline = time.monotonic() + _PROBE_TIMEOUT_S
        while select.select([probe], [], [], max(0.0, deadline - time.monotonic()))[0]:
            data, ancillary, _, _ = probe.recvmsg(len(token), socket.CMSG_SPACE(20))
            for level, kind, info in ancillary:
                if data == token and level == socket.IPPROTO_IPV6 and kind == socket.IPV6_PKTINFO:
                    return struct.unpack_from("@I", info, 16)[0]
    raise OSError(f"no reply from the group {group} on this host")


class HostLocalUdpMulticastBus(can.BusABC):
    """The service's end of a host-local ``udp_multicast`` bus (see the module docstring).

    A datagram that is not a packed CAN frame comes out as an error frame past the filters, so the link counts it
    as a rejected ``bad_frame`` instead of ending.
    """

    def __init__(self, channel: str = HOST_LOCAL_GROUP, port: int = DEFAULT_PORT, fd: bool = True,
                 hop_limit: int = 1, receive_own_messages: bool = False, **kwargs) -> None:
        if not is_host_local_group(channel):
            raise can.CanInitializationError(f"{channel!r} is not an interface-local IPv6 multicast group (ff11::...)")
        if receive_own_messages:
            raise can.CanInterfaceNotImplementedError("receive_own_messages is not supported by udp_multicast")
        try:
            self._socket = self._open_socket(channel, port)
        except OSError as exc:
            raise can.CanInitializationError(
                f"cannot join {channel} on this host ({exc}): IPv6 multicast needs an IPv6-enabled network "
                "interface") from exc
        try:
            super().__init__(channel, **kwargs)
        except BaseException:
            self._socket.close()
            raise
        self.channel_info = f"host-local udp_multicast {channel} port {port}"
        self._can_protocol = can.CanProtocol.CAN_FD if fd else can.CanProtocol.CAN_20
        self._destination = (channel, port)

    @staticmethod
    def _open_socket(group: str, port: int) -> socket.socket:
        """A socket bound to the group on its interface, sharing the port with stock buses of this host."""
        ifindex = group_interface(group)
        sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 1)
            sock.bind((group, port, 0, ifindex))
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP, _join_request(group, ifindex))
        except OSError:
            sock.close()
            raise
        return sock

    def send(self, msg: can.Message, timeout: float | None = None) -> None:
        if msg.is_fd and self._can_protocol is not can.CanProtocol.CAN_FD:
            raise can.CanOperationError("cannot send a CAN FD frame on a classic bus (fd = false)")
        try:
            self._socket.sendto(pack_message(msg), self._destination)
        except OSError as exc:
            raise can.CanOperationError(f"failed to send to {self.channel_info}: {exc}") from exc

    def _recv_internal(self, timeout: float | None) -> tuple[can.Message | None, bool]:
        if not select.select([self._socket], [], [], timeout)[0]:
            return None, False
        data = self._socket.recv(_MAX_DATAGRAM)
        now = time.time()
        try:
            msg = unpack_message(data, replace={"timestamp": now}, check=True)
        except Exception:  # any malformed datagram: msgpack and Message checks raise many kinds
            return can.Message(timestamp=now, is_error_frame=True), True
        if msg.is_fd and self._can_protocol is not can.CanProtocol.CAN_FD:
            return None, False
        return msg, False

    def fileno(self) -> int:
        return self._socket.fileno()

    def shutdown(self) -> None:
        super().shutdown()
        self._socket.close()
