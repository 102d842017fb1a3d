"""Nothing leaves the host unless the user asks for it (README "Network exposure").

Each scenario runs in a private network namespace (``unshare -n``) whose default routes go through a veth pair,
the stand-in lab network; its peer end is a second namespace, the "other host". The scenario must send no
packet on the veth, and what the other host sends must not reach the service. Run as a script inside the
namespace (``python3 tests/e2e/test_network_exposure.py SCENARIO WORKDIR``) it prints one JSON line.

Needs root (``unshare -n``, veth links): skipped with the reason otherwise.
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DBC = ROOT / "configs" / "fes-hil.dbc"
HOST_V4, PEER_V4 = "10.203.0.1", "10.203.0.2"
HOST_V6, PEER_V6 = "fd0a:203::1", "fd0a:203::2"
LAN, PEER_LAN = "lan0", "lan1"
#: The other host's command goes to channel 1 (the local controller stimulates channel 4).
FOREIGN_CHANNEL = 1
FOREIGN_ROUNDS = 20
#: python-can's IPv4 default group, the one of configs/can-lan.toml.
LAN_GROUP = "239.74.163.2"
#: IPv6 chatter of a new link (router solicitation, duplicate address detection, MLD for the link-local
#: address) is switched off, so that any packet on the veth is the scenario's.
QUIET_IPV6 = {"accept_ra": "0", "router_solicitations": "0", "accept_dad": "0", "dad_transmits": "0",
              "addr_gen_mode": "1", "mldv1_unsolicited_report_interval": "10",
              "mldv2_unsolicited_report_interval": "10"}


# -- inside the namespace --------------------------------------------------------------------------------------

def sh(*args: str) -> str:
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.stdout


def lan_packets(name: str = LAN) -> tuple[int, int]:
    """(received, sent) packets of ``name`` in this namespace (/proc/net/dev is per namespace, /sys is not)."""
    with open("/proc/net/dev") as f:
        for line in f:
            dev, _, counters = line.partition(":")
            if dev.strip() == name:
                fields = counters.split()
                return int(fields[1]), int(fields[9])
    raise RuntimeError(f"no {name} in /proc/net/dev")


def mac_of(name: str, peer_pid: int | None = None) -> str:
    cmd = ("ip", "-j", "link", "show", name)
    out = sh(*(("nsenter", "-t", str(peer_pid), "-n") + cmd if peer_pid else cmd))
    return json.loads(out)[0]["address"]


def set_up_lan() -> subprocess.Popen:
    """lo up, the veth ``lan0`` with the default routes, its peer ``lan1`` in the other host; the other host."""
    for key, value in QUIET_IPV6.items():
        for scope in ("default", "all"):
            with open(f"/proc/sys/net/ipv6/conf/{scope}/{key}", "w") as f:
                f.write(value)
    sh("ip", "link", "set", "lo", "up")
    other = subprocess.Popen(["unshare", "-n", "sleep", "300"])
    own_ns = os.readlink("/proc/self/ns/net")
    while not os.path.exists(f"/proc/{other.pid}/ns/net") or os.readlink(f"/proc/{other.pid}/ns/net") == own_ns:
        time.sleep(0.01)
    sh("ip", "link", "add", LAN, "type", "veth", "peer", "name", PEER_LAN, "netns", str(other.pid))
    sh("ip", "addr", "add", f"{HOST_V4}/24", "dev", LAN)
    sh("ip", "addr", "add", f"{HOST_V6}/64", "dev", LAN, "nodad")
    sh("ip", "link", "set", LAN, "up")
    sh("ip", "route", "add", "default", "via", PEER_V4)
    sh("ip", "-6", "route", "add", "default", "via", PEER_V6)
    peer_setup = (f"ip link set lo up && ip addr add {PEER_V4}/24 dev {PEER_LAN} && "
                  f"ip addr add {PEER_V6}/64 dev {PEER_LAN} nodad && ip link set {PEER_LAN} up && "
                  f"ip neigh add {HOST_V4} lladdr {mac_of(LAN)} dev {PEER_LAN} nud permanent && "
                  f"ip neigh add {HOST_V6} lladdr {mac_of(LAN)} dev {PEER_LAN} nud permanent && "
                  f"ip route add default via {HOST_V4}")
    sh("nsenter", "-t", str(other.pid), "-n", "sh", "-c", peer_setup)
    # answers to the other host need no neighbour discovery either: every packet counted is the scenario's
    sh("ip", "neigh", "add", PEER_V4, "lladdr", mac_of(PEER_LAN, other.pid), "dev", LAN, "nud", "permanent")
    sh("ip", "neigh", "add", PEER_V6, "lladdr", mac_of(PEER_LAN, other.pid), "dev", LAN, "nud", "permanent")
    _wait_quiet()
    return other


def _wait_quiet(settle_s: float = 0.3, timeout_s: float = 5.0) -> None:
    """Until the link's own start-up packets are out (the counter stands still for ``settle_s``)."""
    t_end = time.monotonic() + timeout_s
    last = lan_packets()[1]
    while time.monotonic() < t_end:
        time.sleep(settle_s)
        now = lan_packets()[1]
        if now == last:
            return
        last = now


def foreign_commands() -> list[bytes]:
    """The other host's FES_StimCmd frames in python-can's udp_multicast format."""
    import can
    import cantools
    from can.interfaces.udp_multicast.utils import pack_message
    stim = cantools.database.load_file(str(DBC)).get_message_by_name("FES_StimCmd")
    return [pack_message(can.Message(arbitration_id=stim.frame_id, is_extended_id=False, data=stim.encode(dict(
        channel=FOREIGN_CHANNEL, mode=0, enable=1, counter=c, pulse_width=200, amplitude=10, frequency=20))))
        for c in range(1, FOREIGN_ROUNDS + 1)]


def _udp6_frame(src_mac: bytes, src: str, group: str, port: int, payload: bytes) -> bytes:
    """An Ethernet frame carrying one UDP datagram to an IPv6 multicast group (checksum included)."""
    src_ip, dst_ip = socket.inet_pton(socket.AF_INET6, src), socket.inet_pton(socket.AF_INET6, group)
    length = 8 + len(payload)
    pseudo = src_ip + dst_ip + struct.pack("!I3xB", length, socket.IPPROTO_UDP)
    udp = struct.pack("!HHHH", port, port, length, 0) + payload
    data = pseudo + udp + b"\0" * (len(pseudo + udp) % 2)
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    udp = udp[:6] + struct.pack("!H", (~total & 0xFFFF) or 0xFFFF) + udp[8:]
    ip6 = struct.pack("!IHBB", 6 << 28, length, socket.IPPROTO_UDP, 1) + src_ip + dst_ip
    return b"\x33\x33" + dst_ip[-4:] + src_mac + b"\x86\xdd" + ip6 + udp


def other_host_sends(group: str, port: int) -> int:
    """Runs in the other host: the commands to the group (raw frames: the kernel would not even send them), to
    the host's addresses and to python-can's IPv4 LAN group; the number of datagrams sent."""
    commands = foreign_commands()
    raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    raw.bind((PEER_LAN, 0))
    mac = bytes.fromhex(mac_of(PEER_LAN).replace(":", ""))
    sent = 0
    for data in commands:
        raw.send(_udp6_frame(mac, PEER_V6, group, port, data))
        for family, address in ((socket.AF_INET6, HOST_V6), (socket.AF_INET, HOST_V4), (socket.AF_INET, LAN_GROUP)):
            with socket.socket(family, socket.SOCK_DGRAM) as udp:    # a new source port each time: the kernel
                udp.sendto(data, (address, port))                     # spreads flows over the port's sockets
        sent += 4
        time.sleep(0.01)
    return sent


class StockListener:
    """A second local controller on stock python-can: keeps the port bound (so no datagram of the other host
    is answered with an ICMP error) and counts the other host's commands a stock bus takes."""

    def __init__(self, group: str) -> None:
        import can
        import cantools
        self.stim = cantools.database.load_file(str(DBC)).get_message_by_name("FES_StimCmd")
        self.bus = can.Bus(interface="udp_multicast", channel=group)
        self.foreign = 0
        self.running = True
        self.thread = threading.Thread(target=self._count, daemon=True)
        self.thread.start()

    def _count(self) -> None:
        while self.running:
            msg = self.bus.recv(0.1)
            if msg is not None and msg.arbitration_id == self.stim.frame_id:
                self.foreign += self.stim.decode(msg.data)["channel"] == FOREIGN_CHANNEL

    def close(self) -> int:
        self.running = False
        self.thread.join()
        self.bus.shutdown()
        return self.foreign


def scenario_can(work: Path) -> dict:
    """`hil run` on configs/can.toml with examples/can_controller.py, both out of the box; the other host
    sends commands meanwhile."""
    from drivers.can.local_bus import DEFAULT_PORT, HOST_LOCAL_GROUP
    other = set_up_lan()
    cfg = work / "can-here.toml"
    cfg.write_text(f'include = ["{ROOT / "configs" / "can.toml"}"]\n[metrics]\nenabled = false\n')
    ports = work / "ports.json"
    listener = StockListener(HOST_LOCAL_GROUP)
    rx0, tx0 = lan_packets()
    hil = subprocess.Popen([sys.executable, "-m", "hil", "run", "--config", str(cfg), "--duration", "5", "--json",
                            "--port-file", str(ports)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           cwd=ROOT)
    ctl = None
    try:
        t_end = time.monotonic() + 120
        while not ports.exists() and hil.poll() is None and time.monotonic() < t_end:
            time.sleep(0.05)
        ctl = subprocess.Popen([sys.executable, str(ROOT / "examples" / "can_controller.py"), "--dbc", str(DBC),
                                "--stim-channel", "4", "--duration", "2.5"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=ROOT)
        time.sleep(1.0)
        foreign_sent = int(sh("nsenter", "-t", str(other.pid), "-n", sys.executable, __file__, "other-host",
                              HOST_LOCAL_GROUP, str(DEFAULT_PORT)))
        ctl_out, ctl_err = ctl.communicate(timeout=120)
        out, err = hil.communicate(timeout=120)
        rx1, tx1 = lan_packets()                       # before the other host ends: that removes the veth
    finally:
        for proc in (ctl, hil, other):
            if proc is not None:
                proc.kill()
                proc.wait()
    return {"lan_sent": tx1 - tx0, "lan_received": rx1 - rx0, "foreign_sent": foreign_sent,
            "stock_bus_took_foreign": listener.close(), "hil_rc": hil.returncode, "hil_err": err[-2000:],
            "summary": json.loads(out) if hil.returncode == 0 else None, "ctl_rc": ctl.returncode,
            "ctl_err": ctl_err[-2000:], "controller": json.loads(ctl_out) if ctl.returncode == 0 else None}


def scenario_lsl(work: Path) -> dict:
    """tests/drivers/test_lsl.py (its localhost-only liblsl config) in the namespace."""
    other = set_up_lan()
    try:
        _, tx0 = lan_packets()
        tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                                str(ROOT / "tests" / "drivers" / "test_lsl.py")], capture_output=True, text=True, cwd=work,
                               timeout=300)
        _, tx1 = lan_packets()
    finally:
        other.kill()
        other.wait()
    return {"lan_sent": tx1 - tx0, "pytest_rc": tests.returncode, "pytest_out": tests.stdout[-3000:]}


#: Where a host looking for LSL streams sends its query: the subnet's and the all-hosts broadcast and liblsl's
#: link and site multicast groups (a lab PC's default config), all to liblsl's multicast port.
LSL_QUERY_TARGETS = ("10.203.0.255", "255.255.255.255", "224.0.0.183", "239.255.172.215")
LSL_PORT, LSL_REPLY_PORT = 16571, 16999


def other_host_queries_lsl() -> list[str]:
    """Runs in the other host: an LSL stream query to each target; the answers that came back."""
    query = f"LSL:shortinfo\r\nsession_id='default'\r\n{LSL_REPLY_PORT} 4242\r\n".encode()
    answers = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        udp.bind(("", LSL_REPLY_PORT))          # liblsl answers to the port named in the query
        udp.settimeout(0.5)
        for target in LSL_QUERY_TARGETS:
            udp.sendto(query, (target, LSL_PORT))
            try:
                answers.append(f"{target}: {udp.recv(4096)[:40]!r}")
            except socket.timeout:
                pass
    return answers


def scenario_lsl_discovery(work: Path) -> dict:
    """An outlet under the localhost-only liblsl config while the other host looks for streams."""
    from drivers.lsl.driver import LOCALHOST_API_CONFIG
    other = set_up_lan()
    try:
        (work / "lsl_api.cfg").write_text(LOCALHOST_API_CONFIG)
        os.environ["LSLAPICFG"] = str(work / "lsl_api.cfg")
        import pylsl
        outlet = pylsl.StreamOutlet(pylsl.StreamInfo("fes-hil-probe", "FESCommand", 1, 0, "float32", "probe"))
        time.sleep(0.3)
        _, tx0 = lan_packets()
        answers = json.loads(sh("nsenter", "-t", str(other.pid), "-n", sys.executable, __file__, "other-host-lsl"))
        _, tx1 = lan_packets()
        del outlet
    finally:
        other.kill()
        other.wait()
    return {"lan_sent": tx1 - tx0, "answers": answers}



# -- the tests ---------------------------------------------------------------------------------------------------

@functools.cache
def namespace_unavailable() -> str | None:
    """Why a private network namespace with a veth pair cannot be made here, or None."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "needs root for unshare -n and veth links (run the suite as root, as CI does)"
    missing = [tool for tool in ("unshare", "nsenter", "ip") if shutil.which(tool) is None]
    if missing:
        return f"missing {', '.join(missing)} (util-linux, iproute2)"
    probe = subprocess.run(["unshare", "-n", "ip", "link", "add", "probe0", "type", "veth", "peer", "name", "probe1"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot make a network namespace with a veth pair: {probe.stderr.strip()}"
    return None


needs_namespace = pytest.mark.skipif(namespace_unavailable() is not None, reason=str(namespace_unavailable()))


def run_in_namespace(scenario: str, work: Path) -> dict:
    proc = subprocess.run(["unshare", "-n", sys.executable, __file__, scenario, str(work)], capture_output=True,
                          text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_namespace
def test_the_can_pair_out_of_the_box_sends_nothing_on_the_lan_and_hears_no_other_host(tmp_path):
    got = run_in_namespace("can", tmp_path)
    assert got["hil_rc"] == 0, got["hil_err"]
    assert got["ctl_rc"] == 0, got["ctl_err"]
    summary, peer = got["summary"], got["controller"]
    assert peer["frames"]["HIL_Status"] > 100 and peer["echoes"] >= 1       # the pair did talk
    assert got["lan_sent"] == 0                                             # not one packet on the LAN
    assert got["lan_received"] >= got["foreign_sent"] > 0                   # the other host's reached the host
    assert got["stock_bus_took_foreign"] > 0                                # ... and the port, on a wildcard bind
    assert summary["commands_received"] == peer["commands_sent"] > 50       # but not one reached the service
    assert not summary["commands_rejected"]


@needs_namespace
def test_the_lsl_tests_send_nothing_on_the_lan(tmp_path):
    got = run_in_namespace("lsl", tmp_path)
    assert got["lan_sent"] == 0, got["pytest_out"]
    assert got["pytest_rc"] == 0, got["pytest_out"]
    assert " passed" in got["pytest_out"]


@needs_namespace
def test_without_an_ipv6_interface_the_can_setup_stops_with_one_line(tmp_path):
    """Only lo (no interface the kernel could join the group on): one line saying why, no traceback."""
    cfg = tmp_path / "can-here.toml"
    cfg.write_text(f'include = ["{ROOT / "configs" / "can.toml"}"]\n[metrics]\nenabled = false\n')
    proc = subprocess.run(["unshare", "-n", "sh", "-c", f'ip link set lo up && exec "{sys.executable}" -m hil run '
                           f'--config "{cfg}" --duration 1'], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and "cannot join ff11::fe5:c on this host" in lines[0]


@needs_namespace
def test_an_lsl_outlet_under_the_localhost_config_does_not_answer_the_lan(tmp_path):
    """liblsl's discovery: another host's query (broadcast or multicast) gets no answer, nothing is sent."""
    got = run_in_namespace("lsl-discovery", tmp_path)
    assert got["answers"] == []
    assert got["lan_sent"] == 0


if __name__ == "__main__":
    if sys.argv[1] == "other-host":
        print(other_host_sends(sys.argv[2], int(sys.argv[3])))
    elif sys.argv[1] == "other-host-lsl":
        print(json.dumps(other_host_queries_lsl()))
    else:
        scenarios = {"can": scenario_can, "lsl": scenario_lsl, "lsl-discovery": scenario_lsl_discovery}
        print(json.dumps(scenarios[sys.argv[1]](Path(sys.argv[2]))))
