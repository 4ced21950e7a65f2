"""A team's own labelled prompts: a category ("legal") that the built-in prompts never name,
so a classifier that gets it right learned it from what the team pushed."""

from __future__ import annotations

from contracts.category_model import LabelledPrompt

LEGAL = (
    "Does this indemnification clause cap the supplier's liability for data breaches?",
    "Summarise the termination for convenience clause of this master services agreement.",
    "Is a non-compete clause of three years enforceable for a software engineer in California?",
    "Which party bears the risk of loss under FOB shipping point terms in this contract?",
    "Draft a mutual NDA confidentiality clause with a two-year survival period.",
    "Does the force majeure clause cover a pandemic under this lease agreement?",
    "What notice period does the governing law clause require before arbitration?",
    "Is the limitation of liability clause void for gross negligence in this agreement?",
    "Review the assignment clause: can the licensee assign the contract after a merger?",
    "Explain the warranty disclaimer clause and whether it excludes implied warranties.",
    "Does this GDPR data processing agreement name the controller and the processor?",
    "Under the lease, who pays for structural repairs, the landlord or the tenant?",
    "Is the liquidated damages clause a penalty under English contract law?",
    "Which jurisdiction and venue does the dispute resolution clause of this contract pick?",
    "Does the auto-renewal clause of this subscription agreement need a cancellation notice?",
    "Can the employer enforce the arbitration clause against a class action by employees?",
)
# New prompts of the same kind, never trained on.
LEGAL_HELD_OUT = (
    "Does the confidentiality clause of this supplier contract survive termination?",
    "Is the indemnity in this licence agreement capped, and which party gives it?",
)
TEAM_CATEGORIES = ("chat", "code", "extraction", "legal", "math", "reasoning")


def legal_prompts() -> tuple[LabelledPrompt, ...]:
    return tuple(LabelledPrompt(text=t, category="legal") for t in LEGAL)
