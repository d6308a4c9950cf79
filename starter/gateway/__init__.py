"""The HTTP gateway: routes, their dependencies, the middleware and the one code → status
table. Domain rules are the services' (``starter.service``); the gateway speaks HTTP."""

from starter.gateway.app import create_app, serve

__all__ = ["create_app", "serve"]
