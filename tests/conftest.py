"""Test configuration: the convmem plugin provides servers, prefixes and blockbuster;
``tests.offline_http`` the network guard and the hand-written provider cassettes;
``pytester`` runs the plugin's own checks in a child pytest."""

pytest_plugins = ["convmem.testing.pytest_plugin", "tests.offline_http", "pytester"]
