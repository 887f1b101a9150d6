"""The fixtures every test folder may use, registered once here (``pytest_plugins``).

Helper modules live in ``tests/helpers/`` (``tests/`` is on ``sys.path`` through the
``pythonpath`` setting): tests import plain helpers from ``helpers.<module>`` and take
fixtures by name, without importing them. The fixture modules import nothing heavy at
import time, so that collecting a test does not pay for what it does not use.
"""

from __future__ import annotations

pytest_plugins = [
    "helpers.archives",  # engine (both archive engines: C core and pure Python)
    "helpers.full_disk",  # full_disk (a real full tmpfs, and an injected ENOSPC)
    "helpers.ray_cluster",  # ray_cluster (a local 2-CPU Ray, once per session)
    "helpers.s3_server",  # s3_server (moto's S3 server on loopback behind a counting proxy)
]
