"""Muscle elements and groups by name: a group is the letters of its elements' names (``deltclav`` =
``deltclav1`` .. ``deltclav4``), as the stimulation map and the model's strength table name them."""
from __future__ import annotations

import difflib

DIGITS = "0123456789"


def group_of(element: str) -> str:
    """The group an element belongs to: its name without the trailing element number."""
    return element.rstrip(DIGITS)


def element_indices(key: str, names) -> list[int] | None:
    """Indices in ``names`` of element ``key``, or of every element of group ``key``; None if neither."""
    names = list(names)
    if key in names:
        return [names.index(key)]
    members = [i for i, n in enumerate(names) if group_of(n) == key]
    return members or None


def unknown_muscle(key: str, names) -> str:
    """'unknown muscle element or group 'bicps' (did you mean 'bicb'?)' for config errors."""
    names = list(names)
    close = difflib.get_close_matches(key, names + sorted({group_of(n) for n in names}), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown muscle element or group {key!r}{hint}"


def group_members(names) -> dict[str, list[int]]:
    """Group name -> indices of its elements in ``names``, groups in order of their first element."""
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        groups.setdefault(group_of(name), []).append(i)
    return groups
