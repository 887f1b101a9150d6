"""A camera capture in a process of its own, so that no OpenCV call can wedge the agent.

``worker`` runs in the child (``python -m cdml_edge.intake.camera.worker``): it opens one
camera with OpenCV, samples frames at ``fps``, JPEG-encodes them and writes them to its
stdout; ``link.CaptureProcess`` is the agent's end: it starts the child, reads its messages
with a deadline and kills it. ``protocol`` is the framing both ends share, ``settings``
what the child is asked to open and how a camera URL maps to an OpenCV backend.

This package imports nothing of the agent, so the child starts with only OpenCV and NumPy.
"""
