"""The admin API: handlers, bodies, errors, the OpenAPI document."""
