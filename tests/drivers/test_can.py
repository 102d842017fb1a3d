"""CAN transport: DBC, validation of received frames, feedback encoding, link process, end to end."""
from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import can
import cantools
import numpy as np
import pytest
from helpers import hil_in_process

from drivers.can.dbc import NOT_AVAILABLE, generate_dbc, message_table
from drivers.can.driver import CanDriver, CanEndpoint
from drivers.can.feedback import FeedbackSet
from drivers.can.local_bus import HostLocalUdpMulticastBus, host_local_group, is_host_local_group
from drivers.core.contract import frame_dtype
from drivers.core.interface import DriverInitializationError
from drivers.ipc.link import (
    AUX_REJECTS_TOTAL,
    INBOUND_AUX_WORDS,
    KIND_CHANNEL,
    KIND_EXCITATION,
    KIND_HEARTBEAT,
    LINK_RECORD,
    Inbound,
    LinkEndpoint,
    reject_counts,
)
from drivers.ipc.shm_ring import ShmRing
from hil.service.build import muscle_groups
from sim.das3.model import load_model

ROOT = Path(__file__).resolve().parents[2]
DBC = ROOT / "configs" / "fes-hil.dbc"
MODEL = load_model()
GROUPS = {i: [int(m) for m in v] for i, v in enumerate(muscle_groups(MODEL.muscle_names).values())}


@pytest.fixture(scope="module")
def db():
    return cantools.database.load_file(str(DBC))


def test_committed_dbc_is_the_generated_one(db):
    text = generate_dbc(MODEL.dof_names, MODEL.muscle_names, list(muscle_groups(MODEL.muscle_names)))
    assert DBC.read_text() == text, "configs/fes-hil.dbc is stale: run `hil can dbc --out configs/fes-hil.dbc`"
    exc = db.get_message_by_name("FES_Excitation")
    assert sum(s.name.startswith("u_") for s in exc.signals) == MODEL.n_muscles


class Harness:
    """A CanEndpoint on an in-process virtual bus, its receiver thread, and a peer bus for the test."""

    def __init__(self, channel: str, **kw) -> None:
        self.ring = ShmRing.create(LINK_RECORD, 4096, INBOUND_AUX_WORDS)
        self.inbound = Inbound(self.ring)
        self.ep = CanEndpoint("virtual", channel, str(DBC), list(MODEL.muscle_names), **kw)
        self.ep.open()
        self.peer = can.Bus(interface="virtual", channel=channel)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.ep.receive_forever, args=(self.inbound, self.stop), daemon=True)
        self.thread.start()

    def records(self, n: int, timeout: float = 2.0) -> np.ndarray:
        out, t_end = [], time.monotonic() + timeout
        while sum(len(o) for o in out) < n and time.monotonic() < t_end:
            out.append(self.ring.pop_available())
            time.sleep(0.002)
        return np.concatenate(out) if out else np.zeros(0, LINK_RECORD)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        self.ep.close()
        self.peer.shutdown()
        self.ring.release()


@pytest.fixture
def harness(request):
    h = Harness(f"test-{request.node.name}-{random.random()}")
    yield h
    h.close()


def send(bus, db, name, **signals):
    msg = db.get_message_by_name(name)
    bus.send(can.Message(arbitration_id=msg.frame_id, data=msg.encode(signals), is_extended_id=False))


def test_stimulation_excitation_group_and_heartbeat_frames_decode(harness, db):
    send(harness.peer, db, "FES_StimCmd", channel=4, mode=1, enable=1, counter=7, pulse_width=300,
         amplitude=42.5, frequency=33.33)
    send(harness.peer, db, "FES_StimCmd", channel=2, mode=0, enable=0, counter=0, pulse_width=200,
         amplitude=50, frequency=40)
    u = {f"u_{m}": 0.0 for m in MODEL.muscle_names[6:12]}
    u[f"u_{MODEL.muscle_names[8]}"] = 0.5
    send(harness.peer, db, "FES_Excitation", block=1, counter=3, **u)
    group = list(muscle_groups(MODEL.muscle_names)).index("bicb")
    send(harness.peer, db, "FES_GroupExcitation", group=group, counter=1, value=0.25)
    send(harness.peer, db, "FES_Heartbeat", state=0, counter=9)
    rec = harness.records(2 + 6 + 1 + 1)
    assert len(rec) == 2 + 6 + 1 + 1 and not reject_counts(harness.ring)
    assert rec[0]["kind"] == KIND_CHANNEL and rec[0]["index"] == 3 and rec[0]["seq"] == 7
    np.testing.assert_allclose(rec[0]["values"], [300, 42.5, 33.33, 1])
    np.testing.assert_allclose(rec[1]["values"], [200, 0.0, 40, 0])          # enable = 0: amplitude 0
    exc = rec[2:8]
    assert list(exc["index"]) == list(range(6, 12)) and np.all(exc["kind"] == KIND_EXCITATION)
    assert exc[2]["values"][0] == pytest.approx(0.5, abs=0.004)
    grp = rec[8]           # one record for the group: the loop expands it (index -1 - group)
    assert grp["kind"] == KIND_EXCITATION and grp["index"] == -1 - group and grp["seq"] == 1
    assert grp["values"][0] == pytest.approx(0.25)
    assert rec[-1]["kind"] == KIND_HEARTBEAT and rec[-1]["seq"] == 9
    assert harness.ring.aux[0] == 1   # connected




def test_malformed_frames_are_rejected_by_reason_and_the_link_goes_on(harness, db):
    stim = db.get_message_by_name("FES_StimCmd")
    good = stim.encode(dict(channel=1, mode=0, enable=1, counter=1, pulse_width=100, amplitude=10, frequency=30))
    p = harness.peer
    p.send(can.Message(arbitration_id=stim.frame_id, data=good[:6], is_extended_id=False))         # wrong DLC
    p.send(can.Message(arbitration_id=0x2F0, data=good, is_extended_id=False))                    # unknown id
    p.send(can.Message(arbitration_id=0x123, data=good, is_extended_id=False))                    # not ours: filtered
    p.send(can.Message(arbitration_id=stim.frame_id, data=good, is_extended_id=True))             # extended: filtered
    raw = bytearray(good)
    raw[2:4] = (1200).to_bytes(2, "little")                                                        # pulse width 1200
    p.send(can.Message(arbitration_id=stim.frame_id, data=bytes(raw), is_extended_id=False))
    p.send(can.Message(arbitration_id=stim.frame_id, is_remote_frame=True, dlc=8, is_extended_id=False))
    raw = bytearray(good)
    raw[0] = 0x0F                                                                                  # channel 15
    p.send(can.Message(arbitration_id=stim.frame_id, data=bytes(raw), is_extended_id=False))
    p.send(can.Message(arbitration_id=0x210, data=bytes([40, 0, 0, 0, 0, 0, 0, 0]), is_extended_id=False))  # block 40
    p.send(can.Message(arbitration_id=stim.frame_id, data=good, is_extended_id=False))            # accepted
    p.send(can.Message(arbitration_id=stim.frame_id, data=good, is_extended_id=False))            # duplicate
    send(p, db, "FES_StimCmd", channel=1, mode=0, enable=1, counter=0, pulse_width=100, amplitude=10, frequency=30)
    send(p, db, "FES_StimCmd", channel=2, mode=0, enable=1, counter=0, pulse_width=100, amplitude=10, frequency=30)
    send(p, db, "FES_StimCmd", channel=1, mode=0, enable=1, counter=2, pulse_width=120, amplitude=10, frequency=30)
    rec = harness.records(3)          # rejects are counted by the link in aux words, not pushed as records
    assert reject_counts(harness.ring) == {"bad_length": 1, "unknown_id": 1, "out_of_range": 3, "bad_frame": 1,
                                     "duplicate_counter": 1, "stale_counter": 1}
    assert harness.ring.aux[AUX_REJECTS_TOTAL] == 8
    accepted = rec[rec["kind"] == KIND_CHANNEL]
    assert [int(r["index"]) for r in accepted] == [0, 1, 0] and accepted[-1]["values"][0] == 120


def test_counter_history_resets_after_silence(request, db):
    """A restarted controller starts its counters anew: after ``counter_reset_s`` of silence any counter is
    accepted, even one 100 behind the last (a step of 156 forward, which counts as stale); without the
    silence the same counter is refused as stale."""
    h = Harness(f"reset-{random.random()}", counter_reset_s=0.3)
    try:
        send(h.peer, db, "FES_Heartbeat", state=0, counter=200)
        send(h.peer, db, "FES_Heartbeat", state=0, counter=100)     # at once: stale
        first = h.records(1)
        time.sleep(0.4)
        send(h.peer, db, "FES_Heartbeat", state=0, counter=100)     # after the silence: a restarted controller
        rec = np.concatenate([first, h.records(1)])
        assert list(rec["kind"]) == [KIND_HEARTBEAT, KIND_HEARTBEAT] and list(rec["seq"]) == [200, 100]
        assert reject_counts(h.ring) == {"stale_counter": 1}
    finally:
        h.close()


def test_feedback_set_encodes_the_sensor_frame(harness, db):
    frame = np.zeros(1, frame_dtype())[0]
    frame["tick"] = 1234
    frame["q"] = np.linspace(-1.5, 1.5, 11)
    frame["qdot"] = np.linspace(-3, 3, 11)
    frame["th_angles"] = (0.1, 0.7, -0.2)
    frame["hand_position"] = (0.05, -0.45, 0.2)
    frame["gh_stability"] = -0.731
    frame["gh_force"] = (12.3, -45.6, 7.8)
    frame["st_contact_force"] = ((1, 2, 3), (4, 5, 6000))           # saturates at 3276.7 N
    frame["st_in_contact"] = (1, 0)
    frame["status"] = 0b1100001                                      # watchdog, stopping, ROM zeroed
    rec = np.zeros(1, [("echo_seq", "<i4"), ("frame", frame_dtype())])
    rec["frame"] = frame
    rec["echo_seq"] = 77
    stats = np.zeros(4, np.uint64)
    harness.ep.send_feedback(rec, stats)
    got = [harness.peer.recv(1.0) for _ in range(14)]
    assert stats[2] == 14 and got[0].arbitration_id == 0x300
    dec = [db.decode_message(m.arbitration_id, m.data) for m in got]
    st = dec[0]
    assert st["tick"] == 1234 and st["echo_counter"] == 77 and st["watchdog"] == 1 and st["stopping"] == 1
    assert st["rom_zeroed"] == 1 and st["gh_zeroed"] == 0 and st["overrun"] == 0
    assert st["ts_contact"] == 1 and st["ai_contact"] == 0 and st["gh_stability"] == pytest.approx(-0.731)
    q = {k: v for d in dec if "tick8" in d for k, v in d.items() if k.startswith("q_")}
    np.testing.assert_allclose([q[f"q_{n}"] for n in MODEL.dof_names], frame["q"], atol=1e-4)
    forces = {k: v for d in dec for k, v in d.items() if k.endswith(("force_x", "force_y", "force_z"))}
    assert forces["gh_force_y"] == pytest.approx(-45.6) and forces["ai_force_z"] == pytest.approx(3276.7)
    assert all(d.get("tick8", 1234 & 0xFF) == 1234 & 0xFF for d in dec)


def test_can_fd_feedback_is_one_64_byte_frame_per_tick(request, db):
    h = Harness(f"fd-{request.node.name}-{random.random()}", feedback=("HIL_SensorFD",),
                bus_kwargs={"protocol": can.CanProtocol.CAN_FD})
    try:
        frame = np.zeros(1, frame_dtype())[0]
        frame["tick"] = 70001
        frame["q"] = np.linspace(-1.5, 1.5, 11)
        frame["qdot"] = np.linspace(-3, 3, 11)
        frame["th_angles"] = (0.1, 0.7, -0.2)
        frame["gh_stability"] = 40.0                                   # saturates at 32.767
        frame["status"] = 0b1000010                                    # GH unstable, ROM zeroed
        rec = np.zeros(2, [("echo_seq", "<i4"), ("frame", frame_dtype())])
        rec["frame"] = frame
        rec["frame"]["tick"] = (70001, 70002)
        rec["echo_seq"] = 9
        stats = np.zeros(4, np.uint64)
        h.ep.send_feedback(rec, stats)
        got = [h.peer.recv(1.0) for _ in range(2)]
        assert stats[2] == 2 and h.peer.recv(0.05) is None              # one frame per tick, nothing else
        assert all(m.is_fd and m.bitrate_switch and len(m.data) == 64 and m.arbitration_id == 0x310 for m in got)
        dec = [db.decode_message(m.arbitration_id, m.data) for m in got]
        assert [d["tick"] for d in dec] == [70001, 70002]
        d = dec[0]
        assert d["gh_unstable"] == 1 and d["rom_zeroed"] == 1 and d["watchdog"] == 0 and d["echo_counter"] == 9
        assert d["gh_stability"] == pytest.approx(32.767)
        np.testing.assert_allclose([d[f"q_{n}"] for n in MODEL.dof_names], frame["q"], atol=1e-4)
        np.testing.assert_allclose([d[f"qd_{n}"] for n in MODEL.dof_names], frame["qdot"], atol=1e-3)
        np.testing.assert_allclose([d["th_plane_of_elevation"], d["th_elevation"], d["th_axial_rotation"]],
                                   frame["th_angles"], atol=1e-4)
    finally:
        h.close()


CLASSIC_SET = ("HIL_Status", "HIL_JointAngle", "HIL_JointVelocity", "HIL_Arm", "HIL_Force")


def random_frames(n: int, seed: int = 0):
    """Sensor frames with values from well inside to far beyond the DBC ranges, and a few NaN and inf."""
    rng = np.random.default_rng(seed)
    frames = np.zeros(n, frame_dtype())
    for name in ("q", "qdot", "th_angles", "hand_position", "gh_force", "st_contact_force", "gh_stability"):
        shape = frames[name].shape
        values = rng.normal(size=shape) * 10.0 ** rng.integers(-3, 6, size=shape)
        frames[name] = np.where(rng.random(shape) < 0.02, rng.choice([np.nan, np.inf, -np.inf], shape), values)
    frames["tick"] = rng.integers(0, 2 ** 40, n)
    frames["status"] = rng.integers(0, 128, n)
    frames["st_in_contact"] = rng.integers(0, 2, (n, 2))
    return frames, rng.integers(-1, 256, n)


@pytest.mark.parametrize("feedback", [CLASSIC_SET, ("HIL_SensorFD",), ("HIL_Force", "HIL_SensorFD", "HIL_Status")],
                         ids=["classic", "fd", "mixed"])
def test_feedback_packer_gives_the_bytes_of_cantools(db, feedback):
    fs = FeedbackSet([db.get_message_by_name(n) for n in feedback], frame_dtype(), str(DBC))
    frames, echoes = random_frames(400)
    for frame, echo in zip(frames, echoes):
        expected = [msg.encode(signals, strict=False) for msg, signals in fs.signal_values(frame, int(echo))]
        assert fs.pack(frame, int(echo)) == expected


def test_feedback_packer_sends_nan_as_not_available_and_saturates_hand_edited_ranges(tmp_path):
    """NaN goes out as the signal's not_available raw value (raw 0 where a hand-edited DBC names none), infinities at
    the range ends; a range wider than the bits saturates at the bit width instead of wrapping; a big-endian signal
    (hand-edited DBC) is encoded by cantools, with the same rules."""
    text = DBC.read_text().replace(' SG_ q_SCy m0 : 16|16@1- (0.0001,0) [-3.2767|3.2767]',
                                   ' SG_ q_SCy m0 : 16|16@1- (0.0001,0) [-10|10]')
    text = text.replace(' SG_ hand_x m1 : 16|16@1- (0.0001,0)', ' SG_ hand_x m1 : 23|16@0- (0.0001,0)')
    for name in ("gh_stability", "hand_z"):     # no value table: NaN as raw 0
        text = "\n".join(line for line in text.split("\n") if not line.startswith(f"VAL_ {frame_id(name)} {name} "))
    edited = tmp_path / "edited.dbc"
    edited.write_text(text)
    db = cantools.database.load_file(str(edited))
    fs = FeedbackSet([db.get_message_by_name(n) for n in CLASSIC_SET], frame_dtype(), str(edited))
    frame = np.zeros(1, frame_dtype())[0]
    frame["gh_stability"] = np.nan
    frame["gh_force"] = (np.nan, -np.inf, 1.0)
    frame["q"][:3] = (7.0, np.inf, -np.inf)          # q_SCy, q_SCz, q_SCx
    frame["hand_position"] = (-0.123, np.nan, np.nan)
    payloads = fs.pack(frame, 5)
    decoded = [db.decode_message(msg.frame_id, data) for (msg, _, _), data in zip(fs.frames, payloads)]
    assert decoded[0]["gh_stability"] == 0.0 and decoded[0]["echo_counter"] == 5
    assert decoded[1]["q_SCy"] == pytest.approx(3.2767) and decoded[1]["q_SCz"] == pytest.approx(3.2767)
    assert decoded[1]["q_SCx"] == pytest.approx(-3.2767)
    force = next(d for d in decoded if d.get("block") == 0 and "gh_force_x" in d)
    assert force["gh_force_x"] == NOT_AVAILABLE and force["gh_force_y"] == pytest.approx(-3276.7)
    arm = next(d for d in decoded if d.get("block") == 1 and "hand_x" in d)
    assert arm["hand_x"] == pytest.approx(-0.123) and arm["hand_y"] == NOT_AVAILABLE and arm["hand_z"] == 0.0
    k = next(i for i, (msg, block, _) in enumerate(fs.frames) if msg.name == "HIL_Arm" and block == 1)
    assert k in fs._cantools_frames and len(fs._cantools_frames) == 1


def frame_id(signal: str) -> int:
    """The frame id of the classic feedback message that carries ``signal``."""
    db = cantools.database.load_file(str(DBC))
    return next(db.get_message_by_name(m).frame_id for m in CLASSIC_SET
                if signal in [s.name for s in db.get_message_by_name(m).signals])


def test_can_fd_feedback_on_a_classic_bus_is_a_clear_error():
    ep = CanEndpoint("virtual", f"classic-{random.random()}", str(DBC), list(MODEL.muscle_names),
                     feedback=("HIL_Status", "HIL_SensorFD"))
    with pytest.raises(ValueError, match="HIL_SensorFD is a CAN FD frame.*fd = true"):
        ep.open()


def without_signals(dbc: str, frame_id: str, names: list[str]) -> str:
    """The DBC text ``dbc`` without the signals ``names`` of message ``frame_id``: their SG_ lines, comments and value
    tables (one message's names are unique)."""
    kept, message = [], None
    for line in dbc.split("\n"):
        message = line.split()[1] if line.startswith("BO_ ") else message
        words = line.split()
        if words[:1] == ["CM_"]:
            words = words[1:]                           # CM_ SG_ <id> <name>: as VAL_ <id> <name>
        ours = (words[:1] == ["SG_"] and message == frame_id and words[1] in names
                or words[:1] in (["SG_"], ["VAL_"]) and words[1:3] in ([frame_id, n] for n in names))
        kept += [] if ours else [line]
    return "\n".join(kept)


@pytest.mark.parametrize("edit, feedback, words", [
    # a DBC from before the ROM-zeroed bit: HIL_Status would go out without it
    (lambda t: "\n".join(line for line in t.split("\n") if " rom_zeroed " not in line), ("HIL_Status",),
     "values the DBC lacks: ['rom_zeroed']"),
    (lambda t: t.replace("HIL_SensorFD", "HIL_Other"), ("HIL_SensorFD",), "HIL_SensorFD is not in"),
    # one q velocity fewer: the values after it would shift
    (lambda t: without_signals(t, "784", ["qd_PSy"]), ("HIL_SensorFD",), "HIL_SensorFD in"),
    # a DBC for a model with fewer DOF: the last joint-angle block is missing
    (lambda t: without_signals(t, "769", ["q_ELx", "q_PSy"]), ("HIL_Status", "HIL_JointAngle"),
     "values the DBC lacks: ['q[9]', 'q[10]']"),
], ids=["status-without-rom-zeroed", "no-fd-message", "fd-one-signal-short", "angle-block-missing"])
def test_a_dbc_that_does_not_match_the_feedback_is_refused(tmp_path, edit, feedback, words):
    dbc = tmp_path / "old.dbc"
    dbc.write_text(edit(DBC.read_text()))
    assert dbc.read_text() != DBC.read_text()
    ep = CanEndpoint("virtual", f"dbc-{random.random()}", str(dbc), list(MODEL.muscle_names), feedback=feedback,
                     bus_kwargs={"protocol": can.CanProtocol.CAN_FD})
    with pytest.raises(ValueError, match="regenerate it with `hil can dbc`") as err:
        ep.open()
    assert words in str(err.value)


def test_link_process_round_trip_over_udp_multicast(db):
    """The link in its own process; the peer in this one (python-can udp_multicast crosses processes)."""
    group = host_local_group(random.randint(1, 0xFFFF))
    args = dict(interface="udp_multicast", channel=group, dbc_path=str(DBC), muscle_names=list(MODEL.muscle_names))
    group_names = tuple(muscle_groups(MODEL.muscle_names))
    drv = CanDriver(CanEndpoint, args, frame_dtype(), index=0, group_names=group_names)
    peer = can.Bus(interface="udp_multicast", channel=group)
    try:
        assert drv.ports == {"can": f"udp_multicast:{group}"}
        time.sleep(0.2)
        send(peer, db, "FES_GroupExcitation", group=group_names.index("bicb"), counter=4, value=0.25)
        send(peer, db, "FES_StimCmd", channel=3, mode=0, enable=1, counter=5, pulse_width=250, amplitude=30,
             frequency=40)

        class Sink:
            got = []
            groups = []

            def channel(self, *a):
                self.got.append(a)
                return True

            def group_excitation(self, *a):
                self.groups.append(a)
                return True

        sink = Sink()
        t_end = time.monotonic() + 3
        while not sink.got and time.monotonic() < t_end:
            drv.fetch(0, 0, sink)
            time.sleep(0.005)
        assert sink.got and sink.got[0][2:] == (2, 250.0, 30.0, 40.0, 0)
        assert [g[2:] for g in sink.groups] == [("bicb", pytest.approx(0.25))]
        assert drv.echo_seq == 5 and drv.connected()
        frame = np.zeros(1, frame_dtype())
        frame["tick"] = 9
        drv.publish(frame)
        msg = peer.recv(2.0)
        while msg is not None and msg.arbitration_id != 0x300:
            msg = peer.recv(2.0)
        assert msg is not None
        st = db.decode_message(0x300, msg.data)
        assert st["tick"] == 9 and st["echo_counter"] == 5
    finally:
        drv.shutdown()
        peer.shutdown()
    assert not drv.link_alive


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
        s.bind(("::", 0))
        return s.getsockname()[1]


def _first(bus, frame_id: int, timeout_s: float = 2.0):
    """The next frame of ``bus`` with ``frame_id`` (a stock bus also gets its own sends), None after ``timeout_s``."""
    t_end = time.monotonic() + timeout_s
    while (msg := bus.recv(max(0.0, t_end - time.monotonic()))) is not None:
        if msg.arbitration_id == frame_id:
            return msg
    return None


@pytest.mark.parametrize("channel, local", [("ff11::fe5:c", True), ("ff01::1", True), ("FF31::abc", True),
                                            ("ff15::1", False), ("ff02::1", False), ("239.74.163.2", False),
                                            ("::1", False), ("can0", False), (None, False)])
def test_only_interface_local_groups_count_as_host_local(channel, local):
    assert is_host_local_group(channel) is local


def test_the_service_bus_talks_to_stock_python_can_and_takes_only_the_group(db):
    """Frames cross between the service's bus and a stock udp_multicast bus on the group; a unicast datagram to
    the port (what another host can send) reaches the stock bus, which binds the wildcard address, but never the
    service's; garbage on the group comes out as an error frame (counted as bad_frame by the link)."""
    from can.interfaces.udp_multicast.utils import pack_message
    group, port = host_local_group(random.randint(1, 0xFFFF)), _free_udp_port()
    service = HostLocalUdpMulticastBus(channel=group, port=port, can_filters=[
        {"can_id": 0x200, "can_mask": 0x700, "extended": False}])
    stock = can.Bus(interface="udp_multicast", channel=group, port=port)
    try:
        beat = db.get_message_by_name("FES_Heartbeat")
        send(stock, db, "FES_Heartbeat", state=0, counter=1)
        assert _first(service, beat.frame_id) is not None
        service.send(can.Message(arbitration_id=0x300, data=bytes(8), is_extended_id=False))
        assert _first(stock, 0x300) is not None
        datagram = pack_message(can.Message(arbitration_id=beat.frame_id, is_extended_id=False,
                                            data=beat.encode(dict(state=0, counter=2))))
        for _ in range(16):     # new source ports: the kernel spreads unicast flows over a port's sockets
            for family, address in ((socket.AF_INET6, "::1"), (socket.AF_INET, "127.0.0.1")):
                with socket.socket(family, socket.SOCK_DGRAM) as udp:
                    udp.sendto(datagram, (address, port))
        assert _first(stock, beat.frame_id) is not None
        assert service.recv(0.3) is None
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as udp:
            udp.sendto(b"\x93garbage", (group, port))
        got = service.recv(2.0)
        assert got is not None and got.is_error_frame
    finally:
        service.shutdown()
        stock.shutdown()


def test_the_shipped_can_configs_stay_on_this_host_unless_named_lan():
    """configs/can.toml is host-local; configs/can-lan.toml reaches the network and says so (allow_lan)."""
    for name, channel, lan in (("can.toml", "ff11::fe5:c", False), ("can-lan.toml", "239.74.163.2", True)):
        out = subprocess.run([sys.executable, "-m", "hil", "check-config", str(ROOT / "configs" / name), "--show"],
                             capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert out.returncode == 0, out.stderr
        assert f'channel = "{channel}"' in out.stdout and is_host_local_group(channel) is not lan
        assert ("allow_lan = true" in out.stdout) is lan


def test_a_host_local_bus_that_cannot_join_says_why():
    with pytest.raises(can.CanInitializationError, match="not an interface-local IPv6 multicast group"):
        HostLocalUdpMulticastBus(channel="239.74.163.2")


@pytest.mark.parametrize("fd", [False, True], ids=["classic", "fd"])
def test_hil_run_with_a_controller_in_another_process(tmp_path, config_over, fd):
    """`hil run` on configs/can.toml (its own host-local group) and examples/can_controller.py as the peer;
    with the classic feedback set, and with HIL_SensorFD alone (CAN FD)."""
    group = host_local_group(random.randint(1, 0xFFFF))
    cfg = config_over("can.toml", f"""
        [metrics]
        enabled = false
        [[driver]]
        type = "can"
        interface = "udp_multicast"
        channel = "{group}"
        dbc = "{DBC}"
        """ + ('feedback = ["HIL_SensorFD"]\n' if fd else ""))
    rec = tmp_path / "run.hilrec"
    hil = subprocess.Popen([sys.executable, "-m", "hil", "run", "--config", str(cfg), "--duration", "6", "--json",
                            "--record", str(rec), "--port-file", str(tmp_path / "ports.json")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    ctl = subprocess.run([sys.executable, str(ROOT / "examples" / "can_controller.py"), "--channel", group,
                          "--dbc", str(DBC), "--stim-channel", "4", "--amplitude-ma", "60", "--duration", "2.5"],
                         capture_output=True, text=True, timeout=120)
    announced = json.loads((tmp_path / "ports.json").read_text())      # the run goes on for ~3 s
    out, err = hil.communicate(timeout=120)
    assert ctl.returncode == 0, ctl.stderr
    assert hil.returncode == 0, err
    peer = json.loads(ctl.stdout)
    summary = json.loads(out)
    assert announced == {"0:can": {"can": f"udp_multicast:{group}"}}
    assert not (tmp_path / "ports.json").exists()                       # removed with the ports at the end
    assert summary["commands_received"] == peer["commands_sent"] > 50
    assert not summary["commands_rejected"]
    assert -1.0 < float(peer["gh_stability_last"]) < 0.0, peer                # DAS3 models it: a stable GH joint
    if fd:                                                                # one frame a tick
        assert set(peer["frames"]) == {"HIL_SensorFD"} and peer["frames"]["HIL_SensorFD"] > 100
    else:
        assert peer["frames"]["HIL_Status"] > 100
        assert abs(peer["frames"]["HIL_JointAngle"] - 4 * peer["frames"]["HIL_Status"]) <= 8
    assert peer["elbow_last_deg"] > peer["elbow_first_deg"] + 30          # biceps stimulation flexes the elbow
    assert 1 <= peer["echoes"] <= peer["commands_sent"]                  # frames echo the applied commands
    assert summary["watchdog_trips"] >= 1                                 # the controller left before the end
    from hil.recording.hilrec import RecordingReader
    commands = RecordingReader(str(rec)).read("commands")
    assert np.count_nonzero((commands["status"] == 0) & (commands["index"] == 3)) == peer["commands_sent"]


def _vcan_missing() -> str | None:
    if not sys.platform.startswith("linux"):
        return "SocketCAN is Linux only"
    if not os.path.exists("/sys/class/net/vcan0"):
        return ("no vcan0 interface (this kernel has no CAN/vcan support; on a lab PC: modprobe vcan; "
                "ip link add dev vcan0 type vcan; ip link set up vcan0)")
    return None


@pytest.mark.skipif(_vcan_missing() is not None, reason=str(_vcan_missing()))
def test_link_over_socketcan_vcan(db):
    args = dict(interface="socketcan", channel="vcan0", dbc_path=str(DBC), muscle_names=list(MODEL.muscle_names))
    drv = CanDriver(CanEndpoint, args, frame_dtype(), index=0)
    peer = can.Bus(interface="socketcan", channel="vcan0")
    try:
        send(peer, db, "FES_Heartbeat", state=0, counter=1)
        got = []

        class Sink:
            def heartbeat(self, d, ns):
                got.append(ns)

        t_end = time.monotonic() + 3
        while not got and time.monotonic() < t_end:
            drv.fetch(0, 0, Sink())
            time.sleep(0.005)
        assert got
    finally:
        drv.shutdown()
        peer.shutdown()


@pytest.mark.parametrize("extra, key, words", [
    ('colour = "red"', "driver[0].colour", "unknown key"),
    ('dbc = "missing.dbc"', "driver[0].dbc", "not found"),
    ('dbc = "{overlapping}"', "driver[0].dbc", "not a DBC file cantools can read: DBC: \"The signals u_trapscap1 and "
     "u_trapscap1 are overlapping"),
    ('dbc = "{no_arm}"\n        feedback = ["HIL_Status", "HIL_Arm"]', "driver[0].feedback",
     "HIL_Arm is not in"),
    ('feedback = ["HIL_Everything"]', "driver[0].feedback", "unknown entries ['HIL_Everything']"),
    ("feedback_every = 0", "driver[0].feedback_every", "integer in [1,"),
    ('interface = ""', "driver[0].interface", "non-empty string"),
    ('interface = "udp_multicst"', "driver[0].interface", "did you mean 'udp_multicast'"),
    ("priority = 1.5", "driver[0].priority", "integer in [0, 99]"),
    ("feedbak_every = 2", "driver[0].feedbak_every", "did you mean 'feedback_every'"),
    ("priority = 95", "driver[0].priority", "below the loop's priority"),
    ("bus = 5", "driver[0].bus", "python-can Bus arguments"),
    ("counter_reset_s = inf", "driver[0].counter_reset_s", "finite number in (0, 60]"),
    ("counter_reset_s = 0", "driver[0].counter_reset_s", "finite number in (0, 60]"),
    ('bus = { protocol = "CAN_FDX" }', "driver[0].bus", "protocol must be one of CAN_20, CAN_FD"),
    ('feedback = ["HIL_Status", "HIL_SensorFD", "HIL_Status"]', "driver[0].feedback", "HIL_Status more than once"),
    ("feedback = []", "driver[0].feedback", "at least one message"),
    ('channel = "239.74.163.2"', "driver[0].channel", "reaches the network: other hosts could command the arm"),
    ('channel = "ff15::1"', "driver[0].channel", "set allow_lan = true"),
    ('allow_lan = "yes"', "driver[0].allow_lan", "true or false"),
])
def test_can_config_errors_name_the_key(config_over, tmp_path, extra, key, words):
    """Every bad key of a CAN driver is one config error naming it, found when the config is loaded: also a DBC
    file cantools cannot read (one signal twice) and one without a feedback message the config asks for."""
    from hil.config import load_service_config
    from hil.service.build import build_engine
    from sim.das3.config import ConfigError
    text = DBC.read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith(" SG_ u_trapscap1 "))
    (tmp_path / "overlapping.dbc").write_text(text.replace(line, line + "\n" + line))
    (tmp_path / "no_arm.dbc").write_text(text.replace("HIL_Arm", "HIL_Other"))
    extra = extra.replace("{overlapping}", str(tmp_path / "overlapping.dbc")).replace("{no_arm}", str(tmp_path / "no_arm.dbc"))
    cfg = config_over("can.toml", f"""
        [[driver]]
        type = "can"
        {extra if extra.startswith("dbc") else f'dbc = "{DBC}"'}
        {"" if extra.startswith("dbc") else extra}
        """)
    with pytest.raises(ConfigError) as err:
        build_engine(load_service_config(cfg))
    assert err.value.key == key and words in str(err.value)


def test_a_link_process_that_dies_during_start_up_is_reported_at_once():
    """No 30 s wait for a 'ready' that cannot come: EOF on the pipe ends the start-up."""
    t0 = time.monotonic()
    with pytest.raises(DriverInitializationError, match="exited during start-up .exit code 3"):
        CanDriver(os._exit, {"status": 3}, frame_dtype(), index=0)
    assert time.monotonic() - t0 < 20


def test_drivers_built_before_a_failing_one_are_shut_down(config_over):
    import multiprocessing

    from hil.config import load_service_config
    from hil.service.build import build_engine
    from sim.das3.config import ConfigError
    group = host_local_group(random.randint(1, 0xFFFF))
    cfg = config_over("can.toml", f"""
        [[driver]]
        type = "can"
        channel = "{group}"
        dbc = "{DBC}"
        [[driver]]
        type = "can"
        channel = "{group}"
        dbc = "{DBC}"
        feedback_every = 0
        """)
    before = {p.pid for p in multiprocessing.active_children()}
    with pytest.raises(ConfigError, match="feedback_every"):
        build_engine(load_service_config(cfg))
    links = [p for p in multiprocessing.active_children() if p.pid not in before and p.name.startswith("hil-link")]
    assert links == []


class FailingTransport(LinkEndpoint):
    """Opens, sees its controller, then fails as an unplugged adapter does (runs in the link process)."""

    def open(self) -> dict[str, str]:
        self.near, far = socket.socketpair()
        far.send(b"frame")
        self.far = far
        return {"fake": "adapter"}

    def fileno(self) -> int:
        return self.near.fileno()

    def receive(self, inbound, timeout_s: float) -> None:
        inbound.set_connected(True)
        raise OSError(19, "No such device")

    def send_feedback(self, records, stats) -> None:
        pass


def test_a_link_that_fails_while_running_shows_as_disconnected():
    drv = CanDriver(FailingTransport, {}, frame_dtype(), index=0)
    try:
        t_end = time.monotonic() + 10
        while drv.link_alive and time.monotonic() < t_end:
            time.sleep(0.02)
        assert not drv.link_alive
        assert not drv.connected() and drv.stats["connected"] is False
    finally:
        drv.shutdown()


def test_can_table_prints_one_row_per_dbc_message():
    out = subprocess.run([sys.executable, "-m", "hil", "can", "table", "--dbc", str(DBC)], capture_output=True,
                         text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if line.startswith("| 0x")]
    messages = cantools.database.load_file(str(DBC)).messages
    assert sorted(rows) == sorted(r for m in messages for r in rows if r.startswith(f"| 0x{m.frame_id:03X} | {m.name} |"))
    assert len(rows) == len(messages) > 0


def test_the_can_guide_lists_the_table_of_the_committed_dbc():
    """docs/guides/can.md says its message list is `hil can table`: one bullet per table row, the same cells."""
    rows = [row for row in message_table(cantools.database.load_file(str(DBC))).splitlines() if row.startswith("| 0x")]
    heads = ("message", "dir", "bytes", "signals (start bit, bits, scale, unit, range)")
    expected = []
    for row in rows:
        cells = row.strip("|").strip().split(" | ")
        expected.append(f"- **{cells[0]}** — " + "; ".join(f"*{h}*: {c}" for h, c in zip(heads, cells[1:], strict=True)))
    guide = (ROOT / "docs" / "guides" / "can.md").read_text().splitlines()
    assert [line for line in guide if line.startswith("- **0x")] == expected


@pytest.mark.parametrize("damage, words", [
    (lambda t: t[:t.index(" SG_ tick ") + 8] + '"\n', "not a DBC file cantools can read: DBC: \"Invalid syntax"),
    (lambda t: t.replace("BO_ 512 FES_StimCmd", "BO_ 512 FES_StimCmd\nBO_ 512 FES_StimCmd"), "not a DBC file"),
    (lambda t: t.replace("VERSION", "VERSI\x81N"), "is not cp1252 text"),
], ids=["cut", "message-twice", "not-cp1252"])
def test_can_table_of_a_damaged_dbc_is_one_line(tmp_path, damage, words):
    """A DBC that cantools refuses (cut short, a message twice) or that is not cp1252 text: one error line
    naming the file and the parser's reason, exit 2, never the parser's traceback."""
    bad = tmp_path / "bad.dbc"
    bad.write_bytes(damage(DBC.read_text()).encode("latin-1"))        # the DBC is ASCII; \x81 is no cp1252 byte
    out = hil_in_process("can", "table", "--dbc", bad)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith(f"Error: {bad}: ") and words in lines[0], lines[0]
