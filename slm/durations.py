"""A duration as people read it (`42s`, `8m03s`, `2h05m`, `3d04h`): one format for progress lines, slm-status and the
sweep's lines. Standard library only, so the commands that load no torch use it too."""

from __future__ import annotations


def duration(seconds: float) -> str:
    """`42s`, `8m03s`, `2h05m`, `3d04h`."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"
