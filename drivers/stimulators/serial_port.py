"""The serial device of an emulated stimulator: a pseudo-terminal we create, or a tty we open.

A pty's slave is put in raw mode (no echo) before anyone opens it and stays open here, so the master never
sees EIO when a client closes it; the descriptor is non-blocking and every frame goes out in one write.

The line stays raw whatever the client does: with echo on, the pty would send our own replies back to us as
if the client had sent them, and the emulator would answer itself without end; line editing, signals, flow
control and newline mapping would change the frames. Those bits of the slave are locked off
(TIOCSLCKTRMIOS, which needs CAP_SYS_ADMIN), so a client's ``tcsetattr`` cannot set them; where the lock is
refused they are checked and cleared before every read and every write, so at most one reply written in the
instant a client turns echo on comes back.
"""
from __future__ import annotations

import errno
import fcntl
import os
import struct
import termios
import tty

#: termios bits that raw mode clears and that must stay clear: (iflag, oflag, lflag)
RAW_OFF = (termios.BRKINT | termios.ICRNL | termios.INLCR | termios.IGNCR | termios.INPCK | termios.ISTRIP
           | termios.PARMRK | termios.IXON | termios.IXOFF, termios.OPOST,
           termios.ECHO | termios.ECHONL | termios.ICANON | termios.ISIG | termios.IEXTEN)
_LOCK_SIZE = 64          # covers the kernel's struct termios on every architecture; the kernel reads its size


def lock_raw(slave_fd: int) -> bool:
    """Lock the :data:`RAW_OFF` bits of a raw tty so that nobody can set them; False where refused."""
    iflag, oflag, lflag = RAW_OFF
    lock = struct.pack("=4I", iflag, oflag, 0, lflag).ljust(_LOCK_SIZE, b"\0")
    try:
        fcntl.ioctl(slave_fd, termios.TIOCSLCKTRMIOS, lock)
    except OSError:
        return False
    return True


def clear_raw_bits(slave_fd: int) -> bool:
    """Clear the :data:`RAW_OFF` bits if someone set one; True when it had to."""
    attrs = termios.tcgetattr(slave_fd)
    iflag, oflag, lflag = RAW_OFF
    if not (attrs[0] & iflag or attrs[1] & oflag or attrs[3] & lflag):
        return False
    attrs[0], attrs[1], attrs[3] = attrs[0] & ~iflag, attrs[1] & ~oflag, attrs[3] & ~lflag
    termios.tcsetattr(slave_fd, termios.TCSANOW, attrs)
    return True


class SerialPort:
    """A pseudo-terminal we create (the peer opens ``path``) or a tty we open (``baudrate``, 8 data bits,
    ``parity`` "E" or "N", one stop bit); non-blocking fd."""

    def __init__(self, spec: str, baudrate: int, parity: str = "E") -> None:
        self.serial = None
        self.slave_fd = None
        self.raw_guarded = False        # raw bits checked on every read and write (the lock was refused)
        self.raw_resets = 0             # times a client had turned echo (or another raw bit) on
        if spec == "pty":
            self.fd, self.slave_fd = os.openpty()
            tty.setraw(self.slave_fd)          # raw (no echo) before the client opens it
            clear_raw_bits(self.slave_fd)
            self.raw_guarded = not lock_raw(self.slave_fd)
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
        self._keep_raw()
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
        self._keep_raw()
        try:
            return os.read(self.fd, 4096)
        except (BlockingIOError, InterruptedError):
            return b""
        except OSError as exc:
            if exc.errno == errno.EIO:          # pty without an open slave
                return b""
            raise

    def _keep_raw(self) -> None:
        if self.raw_guarded and clear_raw_bits(self.slave_fd):
            self.raw_resets += 1

    def close(self) -> None:
        if self.serial is not None:
            self.serial.close()
        else:
            os.close(self.fd)
            os.close(self.slave_fd)
