"""How far a live capture's grabs run behind the stream's own clock.

``cv2.VideoCapture.grab()`` decodes every frame (FFmpeg cannot skip inter-coded ones), so a
stream faster than the board decodes, or one the network delivers late, builds a backlog: each
frame is grabbed later than the one before, and the grab time (a frame's ``ts_ns``) does not
show it. The stream's own clock does: for each grab, ``wall clock - stream position``
(``CAP_PROP_POS_MSEC``) stays at its floor while the grabs keep up and rises above it by the
backlog when they fall behind. :class:`LagMeter` turns that into seconds.

Only RTSP has a clock to trust (:func:`has_stream_clock`): RTP timestamps come from the
camera's capture clock. FFmpeg's MJPEG demuxers (MJPEG over HTTP, a FIFO) invent timestamps at
25 frames/s whatever the camera sends: a 10 frames/s camera would show 0.6 s more lag each
second that it does not have.
"""

from __future__ import annotations

import collections
import math

CLOCKED_SCHEMES = ("rtsp://", "rtsps://")

WINDOW_S = 600.0
"""The floor is the lowest offset of the last 10 minutes: a camera clock slower than the
board's by 100 ppm (0.36 s an hour) moves it along, so the figure errs by at most 0.06 s; a
backlog that grows for longer than this shows as what it grew within it."""
BUCKET_S = 10.0
"""The floor is kept per 10 s (60 numbers at most, whatever the frame rate)."""
BEHIND_S = 1.0
"""A lag at or above this is falling behind (an event); below half of it, caught up."""
REPORT_S = 1.0
"""The capture process reports the lag at most once a second."""


def has_stream_clock(url: str) -> bool:
    """Whether the stream at ``url`` carries its camera's clock (RTSP: RTP timestamps)."""
    return url.strip().lower().startswith(CLOCKED_SCHEMES)


class LagMeter:
    """The lag, in seconds, of each grab against the stream's clock (see the module)."""

    def __init__(self, window_s: float = WINDOW_S, bucket_s: float = BUCKET_S) -> None:
        self._window_s, self._bucket_s = window_s, bucket_s
        self._floors: collections.deque[list[float]] = collections.deque()  # [start, floor]
        self._last_pos: float | None = None

    def add(self, now_s: float, pos_ms: float) -> float | None:
        """The lag of a grab at ``now_s`` (monotonic) of the frame at ``pos_ms``.

        ``None`` when the position says nothing: not above 0 (a backend without a stream
        clock answers 0) or not past the last one. A position that goes back (the stream
        restarted its clock) starts the meter over.
        """
        if not math.isfinite(pos_ms) or pos_ms <= 0:
            return None
        if self._last_pos is not None and pos_ms <= self._last_pos:
            if pos_ms == self._last_pos:
                return None
            self._floors.clear()
        self._last_pos = pos_ms
        offset = now_s - pos_ms / 1000.0
        if self._floors and now_s - self._floors[-1][0] < self._bucket_s:
            self._floors[-1][1] = min(self._floors[-1][1], offset)
        else:
            self._floors.append([now_s, offset])
        while now_s - self._floors[0][0] > self._window_s:
            self._floors.popleft()
        return offset - min(floor for _, floor in self._floors)
