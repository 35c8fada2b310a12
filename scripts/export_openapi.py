"""Write memroute serve's OpenAPI document to clients/typescript/openapi.json (what the TypeScript client's types
are generated from). Run after changing a route or a wire model, then ``npm run generate`` in
clients/typescript; tests/clients/test_typescript_client.py fails while either is out of date.

    python scripts/export_openapi.py [PATH]
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

TARGET = Path(__file__).resolve().parents[1] / "clients" / "typescript" / "openapi.json"


def openapi_document() -> dict[str, Any]:
    """The document of an app on a default configuration (in a throwaway data directory)."""
    import memroute
    from memroute.server.app import create_app

    with (tempfile.TemporaryDirectory() as data_dir,
          memroute.open(data_dir=data_dir, embedding={"source": "none"}) as mem):
        document: dict[str, Any] = create_app(mem, settings=mem.settings.server).openapi()
        return document


def render(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else TARGET
    target.write_text(render(openapi_document()), encoding="utf-8")
    print(f"wrote {target}")
