"""``/redoc``: the API's reference in ReDoc, served from the package with nothing from the network.

fastapi-offline serves ReDoc's script locally, but the script itself shows its attribution logo
from ``cdn.redoc.ly``. This page is the same ReDoc with a Content-Security-Policy that lets the
browser load nothing but this server's own files (images from here or ``data:`` only), and a
style that hides any image from elsewhere, so no request leaves the host.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

#: Only this server; ReDoc's styles are inline, its search runs in a worker made from a blob.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; frame-ancestors 'none'; "
       "base-uri 'none'; form-action 'none'")


def redoc_page(title: str, openapi_url: str, static_url: str) -> str:
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} - ReDoc</title>
<link rel="icon" href="{static_url}/favicon.png">
<style>body {{ margin: 0; padding: 0; }} img[src^="http:"], img[src^="https:"] {{ display: none; }}</style>
</head>
<body>
<noscript>ReDoc needs JavaScript; the same reference is at /docs and /openapi.json.</noscript>
<redoc spec-url="{openapi_url}"></redoc>
<script src="{static_url}/redoc.standalone.js"></script>
</body>
</html>
"""


def add_redoc_route(app: FastAPI, static_url: str) -> None:
    """``GET /redoc`` on ``app``, whose fastapi-offline files are at ``static_url``."""
    html = redoc_page(app.title, app.openapi_url or "/openapi.json", static_url)

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return HTMLResponse(html, headers={"Content-Security-Policy": CSP, "Cache-Control": "no-store"})
