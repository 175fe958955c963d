"""Static checks of the two Dockerfiles (no image builds on these machines; the e2e suite
uses real images)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def instructions(name: str) -> list[tuple[str, str]]:
    text = (ROOT / name).read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def final_stage(items: list[tuple[str, str]]) -> list[tuple[str, str]]:
    last_from = max(i for i, (w, _) in enumerate(items) if w == "FROM")
    return items[last_from:]


def test_operator_image_is_slim_non_root_and_torch_free() -> None:
    items = instructions("Dockerfile")
    final = final_stage(items)
    assert final[0][1].startswith("python:3.11-slim")
    users = [rest for w, rest in final if w == "USER"]
    assert users and not users[-1].startswith(("0", "root"))
    runs = " ".join(rest for w, rest in items if w == "RUN")
    assert "torch" not in runs.replace("'torch' not in sys.modules", "")
    assert '".[operator]"' in runs
    (entry,) = [rest for w, rest in final if w == "ENTRYPOINT"]
    assert "adl.operator" in entry and (ROOT / "adl" / "operator" / "__main__.py").exists()


def test_job_image_pins_torch_and_ships_the_client_library() -> None:
    items = instructions("Dockerfile.job")
    runs = " ".join(rest for w, rest in items if w == "RUN")
    assert re.search(r"torch==2\.13\.0", runs) and '".[torch]"' in runs
    assert "import torch, adl.client_lib" in runs
    users = [rest for w, rest in items if w == "USER"]
    assert users and not users[-1].startswith(("0", "root"))
