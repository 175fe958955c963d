"""The control plane runs in the operator image, which has no torch."""

from __future__ import annotations

import subprocess
import sys


def test_api_and_controller_import_without_torch() -> None:
    code = (
        "import sys\n"
        "sys.modules['torch'] = None  # any import of torch now raises ImportError\n"
        "import adl.api, adl.api.app, adl.controller, adl.controller.rounds, adl.models\n"
        "app = adl.api.create_app(None)\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
