"""The receiving end of sd_notify: an AF_UNIX datagram socket read as systemd reads it."""

from __future__ import annotations

import socket
import threading


class Collector:
    """Reads every datagram arriving on ``srv`` (as systemd does) into ``fields``."""

    def __init__(self, srv: socket.socket) -> None:
        self.srv = srv
        self.fields: list[str] = []
        srv.settimeout(0.1)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            try:
                self.fields += self.srv.recv(4096).decode().splitlines()
            except TimeoutError:
                continue

    def close(self) -> list[str]:
        self._done.set()
        self._thread.join()
        self.srv.close()
        return self.fields
