"""What one process runs around one Redis client: the adapters, the build-and-publish
sequence, the refit loop, the metrics."""
