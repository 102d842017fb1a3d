"""The byte stuffing both Hasomed protocols share (sciencemode2.md and sciencemode4.md, "Frame"): inside a
frame, each byte of the protocol's stuffed set goes on the wire as ``81, b ^ 55``. The sets differ (ScienceMode2
also stuffs 55 and 0A), so each codec passes its own."""
from __future__ import annotations

STUFFING_BYTE, STUFFING_KEY = 0x81, 0x55


def stuff(data: bytes, stuffed: frozenset[int]) -> bytes:
    """DATA with every byte of ``stuffed`` replaced by ``81, b ^ 55``."""
    out = bytearray()
    for b in data:
        if b in stuffed:
            out += bytes((STUFFING_BYTE, b ^ STUFFING_KEY))
        else:
            out.append(b)
    return bytes(out)
