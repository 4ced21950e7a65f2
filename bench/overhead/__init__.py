"""Sections 1, 2 and 4 (`python -m bench overhead|decision|memory`): the data plane's own costs
under load, its decision speed and its memory, with their A/B rows and micro-costs."""
