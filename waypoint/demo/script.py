"""The offline script: what Claude would do for this supplier, played by the scripted model.

The arguments are the values in `data/documents/`, so the script stands in for Claude's reading
and extraction. The entries after the sanctions screen and after `create_vendor` look at the tool
results, so a sanctions hit or a rejected approval ends the run the way Claude would end it.
"""

from __future__ import annotations

import json

from waypoint._providers.scripts import Script, reply, text, tool_use
from waypoint.protocol import (
    ModelRequest,
    ModelResponse,
    text_of,
)
from waypoint.testing.model_requests import latest_result

SUPPLIER = "Northwind Components GmbH"
COUNTRY = "DE"
TAX_ID = "DE287451934"
IBAN = "DE66370400440412345678"
BIC = "COBADEFFXXX"
CONTACT_NAME = "Katrin Vogel"
CONTACT_EMAIL = "ar@northwind-components.example"
TAX_FORM = "supplier_tax_form.txt"
BANK_LETTER = "bank_confirmation_letter.txt"

WELCOME_SUBJECT = f"Welcome aboard, {SUPPLIER}"
WELCOME_BODY = (
    f"Dear {CONTACT_NAME},\n\n"
    f"{SUPPLIER} is now set up in our vendor registry, and payments will go to the bank account "
    "your bank confirmed. If any of your details change, simply reply to this email.\n\n"
    "Kind regards,\nSupplier Onboarding"
)


def _stop(reason: str) -> ModelResponse:
    return reply(text(f"Onboarding of {SUPPLIER} stopped: {reason}"))


def create_after_screening(request: ModelRequest) -> ModelResponse:
    """Turn 4: create the vendor if the screen came back clear, else stop."""
    result = latest_result(request, "screen_sanctions")
    try:
        clear = json.loads(text_of(result.content))["result"] == "no_match" if result else False
    except (ValueError, KeyError, TypeError):
        clear = False
    if result is None or result.is_error or not clear:
        detail = text_of(result.content) if result else "the screen returned nothing"
        return _stop(f"the sanctions screen is not clear, so no vendor was created. {detail}")
    return reply(
        text(
            "No sanctions match. Creating the vendor record; a compliance officer has to "
            "approve this call before it runs."
        ),
        tool_use("create_vendor", legal_name=SUPPLIER, tax_id=TAX_ID, iban=IBAN, bic=BIC),
    )


def email_after_create(request: ModelRequest) -> ModelResponse:
    """Turn 5: send the welcome email if the vendor was created, else stop and say why."""
    result = latest_result(request, "create_vendor")
    if result is None or result.is_error or "reject" in text_of(result.content).lower():
        detail = text_of(result.content) if result else "create_vendor returned nothing"
        return _stop(f"the vendor record was not created and no email was sent. {detail}")
    return reply(
        text("The vendor record exists. Sending the welcome email to the supplier's contact."),
        tool_use(
            "send_welcome_email", to_addr=CONTACT_EMAIL, subject=WELCOME_SUBJECT, body=WELCOME_BODY
        ),
    )


def summary(request: ModelRequest) -> ModelResponse:
    """Turn 6: the final report, honest about the email if it failed."""
    result = latest_result(request, "send_welcome_email")
    email = (
        f"queued to {CONTACT_EMAIL}"
        if result is not None and not result.is_error
        else f"NOT sent ({text_of(result.content) if result else 'no result'})"
    )
    return reply(
        text(
            f"{SUPPLIER} is onboarded.\n"
            f"- Tax id (VAT): {TAX_ID}\n"
            f"- Bank: IBAN {IBAN}, BIC {BIC} (confirmed by the bank's letter)\n"
            "- Sanctions screen: no match on the sanctions list\n"
            "- Vendor record: created after compliance approval\n"
            f"- Welcome email: {email}"
        )
    )


SCRIPT: Script = [
    reply(
        text(f"I'll start by listing the documents {SUPPLIER} sent."),
        tool_use("list_documents"),
    ),
    reply(
        text("There is a tax form and a bank letter. Reading both."),
        tool_use("read_document", document=TAX_FORM),
        tool_use("read_document", document=BANK_LETTER),
    ),
    reply(
        text(
            f"The tax form gives the legal name {SUPPLIER}, incorporated in Germany, with VAT id "
            f"{TAX_ID}. The bank letter confirms IBAN {IBAN} and BIC {BIC} in the same name. "
            "Screening the company against the sanctions list."
        ),
        tool_use("screen_sanctions", company=SUPPLIER, country=COUNTRY),
    ),
    create_after_screening,
    email_after_create,
    summary,
]
"""One entry per turn: list, read both documents in parallel, screen, create, email, report."""
