"""The soak run (`python -m bench soak`): steady mixed traffic while an engine flaps and tables
are republished."""
