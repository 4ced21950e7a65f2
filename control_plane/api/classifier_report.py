"""The shipped category classifier, described for operators: the admin API's and the CLI's view.

PURE formatting over a table's `CategoryModel` (contracts/category_model.py); no training here.
"""

from __future__ import annotations

from contracts.category_model import CategoryModel
from contracts.routing_table import RoutingTable
from control_plane.api.models import ClassifierReport


def recall(model: CategoryModel) -> dict[str, float | None]:
    """Per category: the share of its prompts the cross-validation predicted right (None when
    the category had no held-out prompt, or there was no cross-validation)."""
    confusion = model.training.confusion
    out: dict[str, float | None] = {}
    for i, category in enumerate(model.categories):
        row = confusion[i] if i < len(confusion) else ()
        total = sum(row)
        out[category] = round(row[i] / total, 4) if total else None
    return out


def classifier_report(table: RoutingTable) -> ClassifierReport:
    """What the current table ships; `shipped` false means data planes use their built-in."""
    model = table.classifier
    if model is None:
        return ClassifierReport(table_version=table.version, shipped=False)
    return ClassifierReport(
        table_version=table.version,
        shipped=True,
        model_sha256=model.model_sha256,
        categories=list(model.categories),
        terms=len(model.terms),
        training=model.training,
        recall=recall(model),
    )


def render_classifier(report: ClassifierReport) -> str:
    """Plain text: the training figures and the cross-validated confusion matrix."""
    if not report.shipped or report.training is None:
        return (
            f"table v{report.table_version} carries no classifier: data planes use their "
            "built-in model (push reports with eval prompts to train one)"
        )
    t = report.training
    accuracy = "n/a" if t.cv_accuracy is None else f"{t.cv_accuracy:.3f}"
    sources = ", ".join(f"{name} {n}" for name, n in t.sources.items())
    lines = [
        f"table v{report.table_version} classifier {report.model_sha256}",
        f"{t.library}",
        f"trained on {sum(t.examples.values())} prompts ({sources}); {report.terms} terms",
        f"cross-validated accuracy {accuracy} ({t.cv_folds} folds)",
    ]
    if t.confusion:
        cats = report.categories
        width = max(len(c) for c in [*cats, "true \\ predicted"]) + 2
        lines.append("true \\ predicted".ljust(width) + "".join(c.rjust(width) for c in cats))
        for category, row in zip(cats, t.confusion, strict=True):
            share = report.recall.get(category)
            tail = "" if share is None else f"   recall {share:.2f}"
            lines.append(category.ljust(width) + "".join(str(n).rjust(width) for n in row) + tail)
    return "\n".join(lines)
