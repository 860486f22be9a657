"""Test configuration: the convmem plugin provides servers, prefixes and blockbuster."""

pytest_plugins = ["convmem.testing.pytest_plugin", "pytester"]
