"""The "Extending: add a transport" checklist, followed by a test and nothing else: a third-party package (in a
scratch site directory) adds a UDP transport with its loop-side driver (a ``drivers.ipc.link.LinkDriver``), its
link-process endpoint (a ``drivers.ipc.link.LinkEndpoint``), its config keys, and the entry point
``fes_hil.drivers``. ``hil check-config`` validates its table, and a real-time ``hil run`` announces its port,
takes its commands and sends its feedback, without any module of the repository edited."""
from __future__ import annotations

import json
import os
import socket
import time

from helpers import CONFIGS, hil, start_hil, wait_for_port_file

TOY_TRANSPORT = '''
"""A toy transport: text datagrams on UDP, ``ch CHANNEL PW_US AMP_MA FREQ_HZ`` or ``hb``; feedback: ``q TICK ELX``
to the last sender every ``feedback_every`` ticks."""
import socket
import time

from drivers.core.config_table import ConfigTable
from drivers.ipc.link import AUX_FRAMES_OUT, LinkDriver, LinkEndpoint, LinkSpec, link_scheduling_keys


class ToyUdpEndpoint(LinkEndpoint):
    """Link-process side: the socket, opened in ``open`` (never in ``__init__``)."""

    def __init__(self, host, port, feedback_every, elbow):
        self.host, self.port, self.every, self.elbow = host, port, feedback_every, elbow
        self.sock, self.peer, self.seq = None, None, 0

    def open(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((self.host, self.port))
        self.sock.setblocking(False)
        return {"udp": "%s:%d" % self.sock.getsockname()}

    def fileno(self):
        return self.sock.fileno()

    def receive(self, inbound, timeout_s):
        while True:
            try:
                data, self.peer = self.sock.recvfrom(512)
            except BlockingIOError:
                return
            now, words = time.monotonic_ns(), data.decode("ascii", "replace").split()
            self.seq += 1
            inbound.count_in()
            inbound.set_connected(True)
            if words == ["hb"]:
                inbound.heartbeat(now, self.seq)
            elif len(words) == 5 and words[0] == "ch":
                inbound.channel(now, self.seq, int(words[1]) - 1, *map(float, words[2:]), 0)
            else:
                inbound.reject(now, "bad_frame", self.seq)

    def send_feedback(self, records, stats):
        for rec in records:
            frame = rec["frame"]
            if self.peer is not None and int(frame["tick"]) % self.every == 0:
                self.sock.sendto(b"q %d %.6f" % (int(frame["tick"]), frame["q"][self.elbow]), self.peer)
                stats[AUX_FRAMES_OUT] += 1

    def close(self):
        if self.sock is not None:
            self.sock.close()


class ToyUdpDriver(LinkDriver):
    """Loop side: the config keys, then the link process with the endpoint."""

    name = "toyudp"

    @classmethod
    def parse_config(cls, table, ctx):
        t = ConfigTable(table, ctx.key, ctx.file)
        t.get("type")
        host = t.string("host", "127.0.0.1")
        port = t.integer("port", 0, 0, 65535)
        every = t.integer("feedback_every", 1, 1, 1000)
        priority, loop_cpu = link_scheduling_keys(t, ctx)
        t.done()
        args = dict(host=host, port=port, feedback_every=every, elbow=list(ctx.dof_names).index("ELx"))
        return LinkSpec(args, priority, loop_cpu)

    @classmethod
    def open(cls, spec, ctx):
        return cls(ToyUdpEndpoint, spec.endpoint_args, ctx.frame_dtype, index=ctx.index, priority=spec.priority,
                   loop_cpu=spec.loop_cpu)
'''


def install_toy_transport(tmp_path) -> dict:
    """The package in a scratch site directory with its entry point; the environment that finds it."""
    site = tmp_path / "site"
    (site / "hil_toyudp-1.0.dist-info").mkdir(parents=True)
    (site / "hil_toyudp.py").write_text(TOY_TRANSPORT)
    (site / "hil_toyudp-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: hil-toyudp\n"
                                                                "Version: 1.0\n")
    (site / "hil_toyudp-1.0.dist-info" / "entry_points.txt").write_text(
        "[fes_hil.drivers]\ntoyudp = hil_toyudp:ToyUdpDriver\n")
    return dict(os.environ, PYTHONPATH=str(site))


def toy_config(tmp_path, driver: str, name: str = "toy.toml"):
    path = tmp_path / name
    path.write_text(f'include = ["{CONFIGS / "loopback.toml"}", "{CONFIGS / "stimulation-default.toml"}"]\n'
                    "[metrics]\nenabled = false\n[loop]\nsched_fifo = false\nmlock = false\n"
                    "[safety]\ntick_stall_timeout_ms = 60000\n"   # a loaded test machine is no stall
                    f"[[driver]]\ntype = \"toyudp\"\n{driver}")
    return path


def test_check_config_reads_the_toy_transport_keys(tmp_path):
    env = install_toy_transport(tmp_path)
    out = hil("check-config", toy_config(tmp_path, "feedback_every = 5\n"), env=env)
    assert out.returncode == 0 and "toyudp" in out.stdout, out.stderr
    out = hil("check-config", toy_config(tmp_path, "feedback_every = 0\n", "bad.toml"), env=env)
    assert out.returncode == 2 and "driver[0].feedback_every" in out.stderr, out.stderr
    out = hil("check-config", toy_config(tmp_path, "colour = 1\n", "typo.toml"), env=env)
    assert out.returncode == 2 and "colour" in out.stderr, out.stderr


def test_a_run_takes_the_toy_transports_commands_and_sends_its_feedback(tmp_path):
    env = install_toy_transport(tmp_path)
    ports = tmp_path / "ports.json"
    proc = start_hil("run", "--config", toy_config(tmp_path, "feedback_every = 5\n"), "--duration", "3",
                     "--port-file", ports, "--json", env=env)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        host, port = wait_for_port_file(ports, proc)["0:toyudp"]["udp"].rsplit(":", 1)
        sock.settimeout(0.05)
        feedback = []
        for i in range(40):
            sock.sendto(b"ch 1 300 40 30" if i % 2 else b"hb", (host, int(port)))
            sock.sendto(b"garbage", (host, int(port)))
            try:
                feedback.append(sock.recv(512).split())
            except TimeoutError:
                pass
            time.sleep(0.02)
        out, err = proc.communicate(timeout=120)
    finally:
        sock.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    summary = json.loads(out)
    assert summary["commands_received"] >= 30, summary
    assert sum(n for k, n in summary["commands_rejected"].items() if k.endswith("bad_frame")) >= 30, summary
    assert feedback and all(f[0] == b"q" and int(f[1]) % 5 == 0 for f in feedback), feedback[:3]
