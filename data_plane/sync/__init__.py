"""Background I/O with Redis and the engines, off every request's path (docs/data_plane.md,
"Code map"): the table watcher, scrapes, live state, discovery, announcements, feedback. It may
import `decision_step`, `resilience`, `upstream`, `decision`, `request`, `telemetry` and the
lowest floor (`domain`, `settings`, ...); never `progress`, `serving`, `gateway` or the
composition roots."""
