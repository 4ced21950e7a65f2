"""The admin API: handlers, bodies, errors, the OpenAPI document.
It may import `runtime`, `loop`, `store`, `build` and `settings`; only `ui` and the
composition roots may import it."""
