"""The base class of every error caused by the user's input."""
from __future__ import annotations

__all__ = ["UserInputError"]


class UserInputError(Exception):
    """An error caused by the user's input -- a file, an option, a config -- not by a bug.

    The command line shows it as one red line on stderr and exits with code 2, never with a traceback.
    It lives in ``sim`` because every layer raises such errors and imports only go sim <- drivers <- hil.
    """
