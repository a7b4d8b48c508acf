"""The web memory inspector at ``/ui``: server-rendered pages over the same service as the API,
assets served from the package (no CDN, no build step, no script)."""
