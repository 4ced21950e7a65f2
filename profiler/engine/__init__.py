"""Talking to the engine under test: the timed OpenAI-compatible client, the engine's facts
(`/v1/models`, `/version`, `/metrics`) and connection failures in words. It may import
`evals` and the lowest floor; never `load`, `reports` or `run`."""
