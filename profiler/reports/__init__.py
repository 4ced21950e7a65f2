"""What a profile produces and where it goes: the ProfileReport (files, tables, plots), the
push to the control plane, and other tools' measurements imported into a report. It may
import `engine`, `evals` and the lowest floor; never `load` (its sibling) or `run`."""
