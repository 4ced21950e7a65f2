"""The operator page (docs/operator_page.md): `static/` and the JSON it reads.
It may import `api` and the floors below; only the composition roots may import it."""
