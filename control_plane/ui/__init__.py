"""The operator page (docs/operator_page.md): `static/` and the JSON it reads."""
