"""Running a profile: one pair end to end (`profiling`), a fleet file, in-process mode, the
`--until-decided` batches and the progress display. It may import `reports`, `load`,
`engine`, `evals` and the lowest floor (`errors`, `settings`, `stats`); only `cli` and
`__main__` may import it."""
