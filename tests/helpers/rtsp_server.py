"""A real RTSP server for the camera tests: GStreamer's gst-rtsp-server (python3-gi).

Run by the system Python that has the GObject bindings (not the venv):
``python3 tests/helpers/rtsp_server.py PORT`` serves ``rtsp://127.0.0.1:PORT/cam``, a live 160x120
test pattern as RTP/JPEG at 10 frames/s, and prints ``ready`` once it listens.
"""

from __future__ import annotations

import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402

PIPELINE = (
    "( videotestsrc is-live=true pattern=ball "
    "! video/x-raw,width=160,height=120,framerate=10/1,format=I420 "
    "! jpegenc ! rtpjpegpay name=pay0 pt=26 )"
)


def main() -> None:
    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(sys.argv[1])
    factory = GstRtspServer.RTSPMediaFactory()
    factory.set_launch(PIPELINE)
    factory.set_shared(True)
    server.get_mount_points().add_factory("/cam", factory)
    if server.attach(None) == 0:
        sys.exit(f"cannot listen on port {sys.argv[1]}")
    print("ready", flush=True)
    GLib.MainLoop().run()


if __name__ == "__main__":
    main()
