"""Behaviour evaluation: scenario files run against a memory service (in-process or over HTTP)."""
