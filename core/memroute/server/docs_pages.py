"""``/docs`` (Swagger UI) and ``/redoc``: FastAPI's pages, with their third-party scripts pinned and checked.

FastAPI's defaults load ``swagger-ui-dist@5`` and ``redoc@2`` — whatever those tags point to today — from a CDN,
on the same origin as the dashboard's session cookie, with no content security policy. Here the assets are
pinned to exact versions with Subresource Integrity hashes (sha384 of the files the npm packages ship, which is
what the CDN serves), and each page has a policy that allows those files, its own inline start-up script (by
hash), and requests to this server only: a CDN serving other bytes gets them refused by the browser. No Python
package ships Swagger UI's assets, so they are not served locally.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Final

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from starlette.requests import Request

__all__ = ["REDOC_JS", "SWAGGER_CSS", "SWAGGER_JS", "install_docs_pages"]

_SWAGGER: Final = "https://cdn.jsdelivr.net/npm/swagger-ui-dist@5.17.14/"
SWAGGER_JS: Final = (_SWAGGER + "swagger-ui-bundle.js",
                     "sha384-wmyclcVGX/WhUkdkATwhaK1X1JtiNrr2EoYJ+diV3vj4v6OC5yCeSu+yW13SYJep")
SWAGGER_CSS: Final = (_SWAGGER + "swagger-ui.css",
                      "sha384-wxLW6kwyHktdDGr6Pv1zgm/VGJh99lfUbzSn6HNHBENZlCN7W602k9VkGdxuFvPn")
REDOC_JS: Final = ("https://cdn.jsdelivr.net/npm/redoc@2.1.5/bundles/redoc.standalone.js",
                   "sha384-0GrsyTQc9Oqd8h+b2dbc4XdR2T/DYpy0tLNNstyx+LBMUyiBbcWPbEs9aRmUcaxD")
_INLINE_SCRIPT: Final = re.compile(r"<script>(.*?)</script>", re.DOTALL)
_NO_FAVICON: Final = "data:,"


def _pinned(html: str, *assets: tuple[str, str]) -> str:
    """``html`` with ``integrity`` and ``crossorigin`` on the tags loading ``assets`` (url, sha384)."""
    for url, integrity in assets:
        checked = f'"{url}" integrity="{integrity}" crossorigin="anonymous"'
        html = html.replace(f'"{url}"', checked)
    return html


def _policy(html: str, sources: str, extra: str = "") -> str:
    hashes = ["'sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode() + "'"
              for script in _INLINE_SCRIPT.findall(html)]
    return (f"default-src 'none'; script-src {' '.join([*hashes, sources])}; style-src {sources} 'unsafe-inline'; "
            f"img-src 'self' data:; connect-src 'self'; {extra}base-uri 'none'; form-action 'none'; "
            "frame-ancestors 'none'")


def _page(html: str, sources: str, extra: str = "") -> HTMLResponse:
    return HTMLResponse(html, headers={"content-security-policy": _policy(html, sources, extra)})


def install_docs_pages(app: FastAPI) -> None:
    """Serve ``/docs`` and ``/redoc`` (the app is made with ``docs_url=None, redoc_url=None``)."""

    async def swagger_ui(request: Request) -> HTMLResponse:
        page = get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} - Swagger UI",
                                   swagger_js_url=SWAGGER_JS[0], swagger_css_url=SWAGGER_CSS[0],
                                   swagger_favicon_url=_NO_FAVICON)
        html = _pinned(bytes(page.body).decode("utf-8"), SWAGGER_JS, SWAGGER_CSS)
        return _page(html, _SWAGGER)

    async def redoc(request: Request) -> HTMLResponse:
        page = get_redoc_html(openapi_url="/openapi.json", title=f"{app.title} - ReDoc", redoc_js_url=REDOC_JS[0],
                              redoc_favicon_url=_NO_FAVICON, with_google_fonts=False)
        html = _pinned(bytes(page.body).decode("utf-8"), REDOC_JS)
        return _page(html, REDOC_JS[0], "worker-src blob:; ")

    # Plain routes, public like FastAPI's own pages (the scope check of every API route does not apply to them).
    app.add_route("/docs", swagger_ui, include_in_schema=False)
    app.add_route("/redoc", redoc, include_in_schema=False)
