"""``/docs`` and ``/redoc`` work without internet: the pages reference only the gateway's
own URLs, and every script, style and icon they name is served with a fitting type."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import pytest

from tests.support.stack import Stack

CONTENT_TYPES = {".js": "javascript", ".css": "text/css", ".png": "image/png"}


class _References(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_docs_pages_need_only_the_gateway(stack: Stack, page: str) -> None:
    response = await stack.http.get(f"{stack.url}{page}")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    parser = _References()
    parser.feed(response.text)
    assert parser.urls, "the page names its assets"
    own = urlsplit(stack.url).netloc
    for url in parser.urls:
        absolute = urljoin(f"{stack.url}{page}", url)
        assert urlsplit(absolute).netloc == own, f"{page} references another host: {url}"
        asset = await stack.http.get(absolute)
        assert asset.status_code == 200, url
        kind = next(v for k, v in CONTENT_TYPES.items() if urlsplit(url).path.endswith(k))
        assert kind in asset.headers["content-type"], (url, asset.headers["content-type"])
    # Nor does any inline script reach out (Swagger UI's online validator, web fonts).
    assert not re.findall(r"https?://", response.text)
    # The page loads the API's own document, from the gateway too.
    assert "'/openapi.json'" in response.text or '"/openapi.json"' in response.text


async def test_docs_pages_are_not_in_the_api_document(stack: Stack) -> None:
    paths = (await stack.http.get(f"{stack.url}/openapi.json")).json()["paths"]
    assert not [path for path in paths if path.startswith(("/docs", "/redoc"))]


async def test_the_gateway_address_opens_on_its_reading_page(stack: Stack) -> None:
    # `moat up` prints the gateway's bare address: a person opening it gets the docs.
    response = await stack.http.get(f"{stack.url}/")
    assert response.status_code in (302, 307), response.text
    assert response.headers["location"] == "/docs"
    paths = (await stack.http.get(f"{stack.url}/openapi.json")).json()["paths"]
    assert "/" not in paths
