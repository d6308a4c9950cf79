"""The API's reading pages, ``/docs`` (Swagger UI, where ``/`` leads) and ``/redoc``
(ReDoc), with their scripts and styles served by the gateway itself from a package installed
with it: FastAPI's defaults load them from a CDN, and the pages stay blank without internet."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.staticfiles import StaticFiles

ASSETS = "/docs/assets"


def install(app: FastAPI) -> None:
    """Serve the pages and their assets (left out of the OpenAPI document)."""
    assets = Path(str(files("fastapi_offline") / "static"))
    app.mount(ASSETS, StaticFiles(directory=assets), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"
    favicon = f"{ASSETS}/favicon.png"

    # The gateway's own address (the one `moat up` prints) opens on its reading page.
    @app.get("/", include_in_schema=False)
    async def home() -> RedirectResponse:
        return RedirectResponse("/docs")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=favicon,
            # Swagger UI's default sends the document to an online validator for a badge.
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} API",
            redoc_js_url=f"{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=favicon,
            with_google_fonts=False,
        )
