"""What one process runs around one Redis client: the adapters, the build-and-publish
sequence, the refit loop, the metrics.
It may import `loop`, `store`, `build` and `settings`; only `api` and the floors above may
import it."""
