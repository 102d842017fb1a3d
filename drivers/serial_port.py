"""The serial device of an emulated stimulator: a pseudo-terminal we create, or a tty we open.

A pty's slave is put in raw mode (no echo) before anyone opens it and stays open here, so the master never
sees EIO when a client closes it; the descriptor is non-blocking and every frame goes out in one write.
"""
from __future__ import annotations

import errno
import os
import termios
import tty


class SerialPort:
    """A pseudo-terminal we create (the peer opens ``path``) or a tty we open (``baudrate``, 8 data bits,
    ``parity`` "E" or "N", one stop bit); non-blocking fd."""

    def __init__(self, spec: str, baudrate: int, parity: str = "E") -> None:
        self.serial = None
        self.slave_fd = None
        if spec == "pty":
            self.fd, self.slave_fd = os.openpty()
            tty.setraw(self.slave_fd)          # raw (no echo) before the client opens it
            self.path = os.ttyname(self.slave_fd)
        else:
            import serial
            self.serial = serial.Serial(spec, baudrate, bytesize=serial.EIGHTBITS, parity=parity,
                                        stopbits=serial.STOPBITS_ONE, timeout=0)
            self.fd = self.serial.fileno()
            self.path = spec
        os.set_blocking(self.fd, False)

    def write(self, data: bytes) -> bool:
        """One whole frame in one write; False when the line is full (nobody reading)."""
        try:
            return os.write(self.fd, data) == len(data)
        except BlockingIOError:
            if self.slave_fd is not None:      # drop what nobody read, so a new reader starts fresh
                termios.tcflush(self.slave_fd, termios.TCIFLUSH)
            return False
        except OSError as exc:
            if exc.errno in (errno.EIO, errno.EAGAIN):
                return False
            raise

    def read(self) -> bytes:
        try:
            return os.read(self.fd, 4096)
        except (BlockingIOError, InterruptedError):
            return b""
        except OSError as exc:
            if exc.errno == errno.EIO:          # pty without an open slave
                return b""
            raise

    def close(self) -> None:
        if self.serial is not None:
            self.serial.close()
        else:
            os.close(self.fd)
            os.close(self.slave_fd)
