"""The lab sensors' frame fields (IMU, encoders, evoked EMG; hil/rt/lab_sensors.py) on every transport that carries
sensors: the LSL arm stream (real pylsl on localhost), the serial sensor stream (a pty pair) and the CAN feedback
messages (python-can virtual bus)."""
from __future__ import annotations

import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from drivers.core.contract import frame_dtype, lab_fields, sensor_frame_dtype
from drivers.ipc.link import INBOUND_AUX_WORDS
from drivers.lsl.streams import ARM_STREAM, arm_channels, desc_channels
from sim.das3.model import DOF_NAMES

ROOT = Path(__file__).resolve().parents[2]

LAB = sensor_frame_dtype(frame_dtype(), imu=True, encoder_joints=("ELx", "PSy"), emg_channels=2)


def lab_frames(n: int) -> np.ndarray:
    """n frames whose lab fields hold distinct values (tick k: quaternion rows, rates, counts, M-waves)."""
    f = np.zeros(n, LAB)
    f["tick"] = np.arange(n)
    f["q"][:, 9] = np.arange(n) * 0.01
    half = np.sqrt(0.5)
    f["imu_quat"][:] = [[half, 0.0, half, 0.0], [0.5, 0.5, 0.5, 0.5]]
    f["imu_gyro"][:, 0, 1] = 0.25 + 0.01 * np.arange(n)
    f["imu_gyro"][:, 1, 2] = -1.5
    f["encoder_ELx"], f["encoder_PSy"] = 1024 + np.arange(n), -17
    f["emg_mwave"][:, 0] = 0.004 + 1e-5 * np.arange(n)
    return f


def test_lab_fields_keep_the_default_frame_and_sit_on_its_float_grid():
    base = frame_dtype()
    assert sensor_frame_dtype(base) is base
    assert LAB.names[:len(base.names)] == base.names and all(LAB.fields[n] == base.fields[n] for n in base.names)
    first = base.fields["q"][1]
    assert all((LAB.fields[n][1] - first) % 8 == 0 for n in lab_fields(LAB))
    assert lab_fields(LAB) == ("imu_quat", "imu_gyro", "encoder_ELx", "encoder_PSy", "emg_mwave")
    assert lab_fields(base) == ()


@pytest.fixture(scope="module")
def pylsl(lsl_config):
    import pylsl
    return pylsl


def test_lsl_arm_stream_carries_the_lab_sensors_after_the_arm(pylsl):
    from drivers.lsl.driver import LslEndpoint, tick_record

    ep = LslEndpoint(list(DOF_NAMES), ["biceps", "triceps"], 0.001, f"type='None{uuid.uuid4().hex}'",
                     lab=lab_fields(LAB))
    ep.open()
    try:
        found = pylsl.resolve_byprop("name", ARM_STREAM, 1, 10.0)
        inlet = pylsl.StreamInlet(found[0], recover=False)
        inlet.open_stream(5.0)
        info = inlet.info(5.0)
        channels = desc_channels(info)
        assert info.channel_count() == 18 + 8 + 6 + 2 + 2 == len(channels)
        assert channels == list(arm_channels(DOF_NAMES, lab_fields(LAB), ["biceps", "triceps"]))
        labels = [c.label for c in channels]
        assert labels[18:22] == ["imu_upper_arm_qw", "imu_upper_arm_qx", "imu_upper_arm_qy", "imu_upper_arm_qz"]
        assert labels[26:29] == ["imu_upper_arm_gyro_x", "imu_upper_arm_gyro_y", "imu_upper_arm_gyro_z"]
        assert labels[32:] == ["encoder_ELx", "encoder_PSy", "biceps_mwave", "triceps_mwave"]
        assert channels[34].unit == "volts" and channels[32].unit == "counts"
        recs = np.zeros(4, tick_record(LAB, 2))
        recs["start_ns"] = time.monotonic_ns() + np.arange(4) * 1_000_000
        recs["frame"] = lab_frames(4)
        ep.send_feedback(recs, np.zeros(INBOUND_AUX_WORDS, np.uint64))
        values, t_end = [], time.monotonic() + 5.0
        while len(values) < 4 and time.monotonic() < t_end:
            values += inlet.pull_chunk(timeout=0.1)[0]
        got = np.array(values, np.float32)
        want = lab_frames(4)
        assert np.array_equal(got[:, 18:26], want["imu_quat"].reshape(4, 8).astype(np.float32))
        assert np.array_equal(got[:, 26:32], want["imu_gyro"].reshape(4, 6).astype(np.float32))
        assert np.array_equal(got[:, 32], want["encoder_ELx"].astype(np.float32)) and np.all(got[:, 33] == -17)
        assert np.array_equal(got[:, 34:36], want["emg_mwave"].astype(np.float32))
        assert np.allclose(got[:, 9], np.arange(4) * 0.01)           # the arm's own channels unchanged
    finally:
        ep.close()


def context(frame: np.dtype, channels=("biceps", "triceps")):
    """A driver's view of a run whose sensor frame is ``frame`` (drivers.core.interface rule 6)."""
    from drivers.core.interface import DriverContext

    return DriverContext(index=0, file="test.toml", base_dir=str(ROOT / "configs"), period_s=0.001,
                         dof_names=DOF_NAMES, muscle_names=(), group_names=(), channel_names=channels,
                         frame_dtype=frame)


def test_lsl_driver_appends_the_lab_fields_only_when_the_run_has_them(lsl_config):
    from drivers.lsl.driver import LslDriver

    assert "lab" not in LslDriver.parse_config({"type": "lsl"}, context(frame_dtype())).endpoint_args
    args = LslDriver.parse_config({"type": "lsl"}, context(LAB)).endpoint_args
    assert args["lab"] == ("imu_quat", "imu_gyro", "encoder_ELx", "encoder_PSy", "emg_mwave")


def test_serial_sensor_stream_carries_the_lab_fields_on_a_pty():
    """The ScienceMode2 endpoint streams whole frames: with lab sensors each packet holds their fields too, and a
    reader given the run's frame layout decodes them (a reader of the plain layout counts length errors)."""
    import serial

    from drivers.stimulators.rehastim2.driver import ScienceModeEndpoint
    from drivers.stimulators.sensor_stream import SensorStreamReader, read_frames

    ep = ScienceModeEndpoint("pty", "pty", channel_map=[0, 1, -1, -1, -1, -1, -1, -1], client_timeout_s=0.5)
    ports = ep.open()
    sensors = serial.Serial(ports["sensors"], timeout=0.5)
    try:
        out = np.zeros(3, [("echo_seq", "<i4"), ("frame", LAB)])
        out["frame"] = lab_frames(3)
        out["echo_seq"] = 7
        ep.send_feedback(out, np.zeros(INBOUND_AUX_WORDS, np.uint64))
        got = read_frames(sensors, 3, timeout_s=5.0, dtype=LAB)
        assert [e for e, _ in got] == [7, 7, 7]
        assert b"".join(f.tobytes() for _, f in got) == lab_frames(3).tobytes()
        plain = SensorStreamReader(frame_dtype())
        ep.send_feedback(out[:1], np.zeros(INBOUND_AUX_WORDS, np.uint64))
        t_end = time.monotonic() + 5.0
        while plain.length_errors == 0 and time.monotonic() < t_end:
            assert plain.feed(sensors.read(max(1, sensors.in_waiting))) == []
        assert plain.length_errors >= 1
    finally:
        sensors.close()
        ep.close()


def test_can_feedback_carries_the_imu_and_emg_messages_on_a_virtual_bus(request):
    """A CanEndpoint with the run's lab frame sends HIL_ImuQuat, HIL_ImuGyro and HIL_Emg (python-can virtual bus,
    decoded with cantools from the shipped DBC), and the packer gives cantools' bytes for them."""
    import random

    import can
    import cantools

    from drivers.can.driver import CanEndpoint
    from drivers.can.feedback import FeedbackSet

    dbc = ROOT / "configs" / "fes-hil.dbc"
    db = cantools.database.load_file(str(dbc))
    lab8 = sensor_frame_dtype(frame_dtype(), imu=True, encoder_joints=("ELx",), emg_channels=8)
    frame = np.zeros(1, lab8)
    frame["tick"] = 300
    frame["imu_quat"] = lab_frames(1)["imu_quat"]
    frame["imu_gyro"] = lab_frames(1)["imu_gyro"]
    frame["emg_mwave"][0, 3] = 0.0045
    channel = f"lab-{request.node.name}-{random.random()}"
    ep = CanEndpoint("virtual", channel, str(dbc), [], feedback=("HIL_Status", "HIL_ImuQuat", "HIL_ImuGyro", "HIL_Emg"),
                     frame=lab8)
    ep.open()
    peer = can.Bus(interface="virtual", channel=channel)
    try:
        rec = np.zeros(1, [("echo_seq", "<i4"), ("frame", lab8)])
        rec["frame"] = frame
        ep.send_feedback(rec, np.zeros(4, np.uint64))
        got = [peer.recv(1.0) for _ in range(1 + 3 + 2 + 3)]
        assert peer.recv(0.05) is None
        values = {}
        for m in got[1:]:
            values.update(db.decode_message(m.arbitration_id, m.data))
        assert {m.arbitration_id for m in got[1:]} == {0x305, 0x306, 0x307} and values["tick8"] == 300 & 0xFF
        assert values["imu_upper_arm_qw"] == pytest.approx(np.sqrt(0.5), abs=2 ** -14)
        assert values["imu_forearm_qz"] == pytest.approx(0.5, abs=2 ** -14)
        assert values["imu_upper_arm_gyro_y"] == pytest.approx(0.25, abs=1e-3)
        assert values["imu_forearm_gyro_z"] == pytest.approx(-1.5, abs=1e-3)
        assert values["mwave_4"] == pytest.approx(0.0045, abs=1e-6) and values["mwave_1"] == 0
        fs = FeedbackSet([db.get_message_by_name(n) for n in ("HIL_ImuQuat", "HIL_ImuGyro", "HIL_Emg")], lab8)
        rng = np.random.default_rng(3)
        for _ in range(50):
            f = np.zeros(1, lab8)[0]
            f["imu_quat"], f["imu_gyro"] = rng.uniform(-1, 1, (2, 4)), rng.normal(0, 10, (2, 3))
            f["emg_mwave"] = rng.uniform(0, 0.04, 8)
            assert fs.pack(f, 1) == [msg.encode(sig, strict=False) for msg, sig in fs.signal_values(f, 1)]
    finally:
        peer.shutdown()
        ep.close()


def test_can_feedback_sends_a_frame_per_joint_encoder(request):
    """HIL_Encoder: one frame per configured encoder (block = the joint's DOF index), its count as an int32, and no
    frame for a joint without one; the packer gives cantools' bytes, saturating at the int32 range."""
    import random

    import can
    import cantools

    from drivers.can.driver import CanEndpoint
    from drivers.can.feedback import FeedbackSet

    dbc = ROOT / "configs" / "fes-hil.dbc"
    db = cantools.database.load_file(str(dbc))
    channel = f"encoder-{request.node.name}-{random.random()}"
    ep = CanEndpoint("virtual", channel, str(dbc), [], feedback=("HIL_Status", "HIL_Encoder"), frame=LAB)
    ep.open()
    peer = can.Bus(interface="virtual", channel=channel)
    try:
        rec = np.zeros(1, [("echo_seq", "<i4"), ("frame", LAB)])
        rec["frame"] = lab_frames(3)[2]
        ep.send_feedback(rec, np.zeros(4, np.uint64))
        got = [peer.recv(1.0) for _ in range(3)]
        assert peer.recv(0.05) is None                      # SCy .. GHyy have no encoder: no frame
        decoded = [db.decode_message(m.arbitration_id, m.data) for m in got[1:]]
        assert [m.arbitration_id for m in got[1:]] == [0x308, 0x308] and [d["tick8"] for d in decoded] == [2, 2]
        assert [d["block"] for d in decoded] == [DOF_NAMES.index("ELx"), DOF_NAMES.index("PSy")]
        assert decoded[0]["encoder_ELx"] == 1026 and decoded[1]["encoder_PSy"] == -17
        fs = FeedbackSet([db.get_message_by_name("HIL_Encoder")], LAB)
        f = np.zeros(1, LAB)[0]
        for counts in ((3e9, -3e9), (2147483647.0, -2147483648.0), (123456789.0, -5.0)):
            f["encoder_ELx"], f["encoder_PSy"] = counts
            assert fs.pack(f, 1) == [msg.encode(sig, strict=False) for msg, sig in fs.signal_values(f, 1)]
        f["encoder_ELx"], f["encoder_PSy"] = 3e9, -3e9
        assert [db.decode_message(0x308, b)[n] for b, n in zip(fs.pack(f, 1), ("encoder_ELx", "encoder_PSy"))] == [
            2147483647, -2147483647]
        with pytest.raises(ValueError, match=r"HIL_Encoder needs \[sensor.encoder\]"):
            FeedbackSet([db.get_message_by_name("HIL_Encoder")], sensor_frame_dtype(frame_dtype(), imu=True))
    finally:
        peer.shutdown()
        ep.close()


def test_can_driver_takes_the_run_frame_and_refuses_lab_feedback_without_the_sensor():
    from drivers.can.driver import CanDriver
    from sim.das3.config import ConfigError

    table = {"type": "can", "interface": "virtual", "channel": "x", "dbc": "fes-hil.dbc"}
    assert "frame" not in CanDriver.parse_config(table, context(frame_dtype())).endpoint_args
    assert CanDriver.parse_config(table, context(LAB)).endpoint_args["frame"] == LAB
    imu_only = sensor_frame_dtype(frame_dtype(), imu=True)
    for feedback, key in ((["HIL_Status", "HIL_ImuQuat"], "[sensor.imu]"), (["HIL_Status", "HIL_Emg"], "[sensor.emg]"),
                          (["HIL_Status", "HIL_Encoder"], "[sensor.encoder]")):
        with pytest.raises(ConfigError) as err:
            CanDriver.parse_config({**table, "feedback": feedback}, context(imu_only if "Emg" in feedback[1]
                                                                            else frame_dtype()))
        assert err.value.key == "driver[0].feedback" and key in str(err.value)
    assert CanDriver.parse_config({**table, "feedback": ["HIL_Status", "HIL_Encoder"]}, context(LAB)).endpoint_args[
        "feedback"] == ("HIL_Status", "HIL_Encoder")


def test_hil_run_publishes_the_imus_on_the_lsl_arm_stream(pylsl, lsl_config, tmp_path, config_over):
    """`hil run` (real time) on configs/lsl.toml with [sensor.imu]: the arm stream an inlet resolves has the 14 IMU
    channels after the arm's 18, and its samples carry unit quaternions."""
    import signal
    import subprocess
    import sys

    from helpers import wait_for_port_file

    name = f"none-{uuid.uuid4().hex[:8]}"
    cfg = config_over("lsl.toml", f"""
        [metrics]
        enabled = false
        [sensor.imu]
        [[driver]]
        type = "lsl"
        api_config = "{lsl_config}"
        [driver.inlet]
        name = "{name}"
        """)
    ports = tmp_path / "ports.json"
    started = pylsl.local_clock()      # an arm stream made before this (an earlier test's, closing) is not this run's
    hil = subprocess.Popen([sys.executable, "-m", "hil", "run", "--config", str(cfg), "--duration", "60", "--json",
                            "--port-file", str(ports)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           cwd=ROOT)
    try:
        wait_for_port_file(ports, hil)
        found = pylsl.resolve_bypred(f"name='{ARM_STREAM}' and created_at>{started}", 1, 10.0)
        inlet = pylsl.StreamInlet(found[0], recover=False)
        inlet.open_stream(5.0)
        assert inlet.info(5.0).channel_count() == 18 + 14
        values, t_end = [], time.monotonic() + 10.0
        while len(values) < 50 and time.monotonic() < t_end:
            values += inlet.pull_chunk(timeout=0.1)[0]
        got = np.array(values)
        assert len(got) >= 50
        quat = got[:, 18:26].reshape(-1, 2, 4)
        assert np.allclose(np.linalg.norm(quat, axis=2), 1.0, atol=1e-5)
    finally:
        hil.send_signal(signal.SIGTERM)                 # a clean stop, however long the start took under load
        out, err = hil.communicate(timeout=120)
    assert hil.returncode == 0, err[-2000:]
