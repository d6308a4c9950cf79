"""The conformance kit, opted in: its servers, fixtures and checks."""

pytest_plugins = ["moat.testing"]
