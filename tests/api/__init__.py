"""Tests of the HTTP API (api/)."""
