"""The vendor-onboarding tools, built over a downstream folder chosen at runtime.

`build_tools(demo_dir)` returns the tools as closures over that folder, so the worker and each
test pick their own downstream. Listing and reading the supplier's documents and screening it
against the sanctions list are `read` tools. Creating the vendor is an `effect` that needs a
compliance officer's approval and is reconciled after a crash by looking its effect key up in
the registry; queuing the welcome email is an `effect` the outbox deduplicates on its key.

Crash-test hook: given `barrier_dir`, both effect tools check the barriers `before_commit.<tool>`
(the downstream write is done but uncommitted) and `after_commit.<tool>` (committed, result not
yet returned); see `barriers.py`. `build_agent` passes `$WAYPOINT_DEMO_BARRIER_DIR`.
"""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from waypoint._tools import Tool, ToolContext, tool
from waypoint.demo import documents, downstream, sanctions
from waypoint.demo.barriers import Barriers
from waypoint.demo.documents import DOCUMENTS_DIR, SANCTIONS_FILE

_BIC = re.compile(r"[A-Z]{6}[A-Z0-9]{2}([A-Z0-9]{3})?")
_IBAN = re.compile(r"[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}")

SCREEN_HOLDS = timedelta(hours=24)
"""A sanctions screen older than this is run again before the vendor record is created: an
approval that takes three days acts on today's list, not the one the run began with."""


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class ListDocumentsArgs(_Args):
    """No arguments: the demo has one supplier and its documents."""


class ReadDocumentArgs(_Args):
    """Which document to read."""

    document: str = Field(
        min_length=1,
        description="A document name exactly as list_documents returns it, e.g. "
        "`supplier_tax_form.txt`.",
    )


class ScreenSanctionsArgs(_Args):
    """The company to screen."""

    company: str = Field(min_length=1, description="The supplier's full legal name.")
    country: str | None = Field(
        default=None,
        description="ISO 3166-1 alpha-2 code of the country of incorporation, e.g. `DE`. "
        "Reported next to matches; it does not narrow them.",
    )


class CreateVendorArgs(_Args):
    """The vendor record, exactly as extracted from the supplier's documents."""

    legal_name: str = Field(
        min_length=1, description="The supplier's legal name, as on its tax form."
    )
    tax_id: str = Field(
        min_length=1,
        description="Tax id from the tax form; for EU suppliers the VAT identification number, "
        "e.g. `DE123456789`.",
    )
    iban: str = Field(description="IBAN from the bank letter; spaces are ignored.")
    bic: str = Field(description="BIC (SWIFT code) from the bank letter, 8 or 11 characters.")

    @field_validator("iban")
    @classmethod
    def _valid_iban(cls, value: str) -> str:
        iban = value.replace(" ", "").upper()
        if not _IBAN.fullmatch(iban):
            raise ValueError(
                f"{value!r} is not an IBAN: expected a country code, 2 check digits "
                "and up to 30 letters and digits"
            )
        if int("".join(str(int(c, 36)) for c in iban[4:] + iban[:4])) % 97 != 1:
            raise ValueError(f"{value!r} fails the IBAN checksum: re-read it from the bank letter")
        return iban

    @field_validator("bic")
    @classmethod
    def _valid_bic(cls, value: str) -> str:
        bic = value.replace(" ", "").upper()
        if not _BIC.fullmatch(bic):
            raise ValueError(f"{value!r} is not a valid BIC: expected 8 or 11 letters and digits")
        return bic


class SendWelcomeEmailArgs(_Args):
    """The welcome email to the supplier's contact."""

    to_addr: str = Field(
        pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$",
        description="The supplier's contact email address, as its documents give it.",
    )
    subject: str = Field(min_length=1, max_length=200, description="Subject line.")
    body: str = Field(
        min_length=1, description="Plain-text body; never include bank details or tax ids."
    )


def _key(ctx: ToolContext) -> str:
    if not ctx.effect_key:
        raise ValueError(f"step {ctx.step_id} has no effect key; effect tools need one")
    return ctx.effect_key


def build_tools(
    demo_dir: Path,
    *,
    barrier_dir: Path | None = None,
    documents_dir: Path = DOCUMENTS_DIR,
    sanctions_file: Path = SANCTIONS_FILE,
) -> list[Tool]:
    """The agent's tools, writing to the downstream SQLite files in `demo_dir`.

    Args:
        demo_dir: Folder of the vendor registry and the email outbox.
        barrier_dir: Folder of crash-test barriers; None disables them.
        documents_dir: The supplier's documents.
        sanctions_file: The sanctions list, a `name,country,program` CSV file.
    """
    barriers = Barriers(barrier_dir)

    @tool("read")
    async def list_documents(args: ListDocumentsArgs) -> list[str]:
        """List the names of the documents the supplier sent."""
        return await asyncio.to_thread(documents.document_names, documents_dir)

    @tool("read")
    async def read_document(args: ReadDocumentArgs) -> str:
        """Return the full text of one of the supplier's documents, by its listed name."""
        return await asyncio.to_thread(documents.read_document, args.document, documents_dir)

    @tool("read", fresh_for=SCREEN_HOLDS)
    async def screen_sanctions(args: ScreenSanctionsArgs) -> dict[str, Any]:
        """Screen a company against the sanctions list; any match means onboarding must stop."""
        return await asyncio.to_thread(sanctions.screen, args.company, args.country, sanctions_file)

    async def write_once(
        table: downstream.Table, tool_name: str, ctx: ToolContext, row: dict[str, Any]
    ) -> dict[str, Any]:
        """Write `row` once under the step's key, the demo's crash barriers either side of it."""
        hook = barriers.hook("before_commit", tool_name)
        done = await asyncio.to_thread(table.insert_once, demo_dir, _key(ctx), row, hook)
        await asyncio.to_thread(barriers.check, "after_commit", tool_name)
        return done

    @tool("effect", requires_approval=True)
    async def create_vendor(args: CreateVendorArgs, ctx: ToolContext) -> dict[str, Any]:
        """Create the supplier's record in the vendor registry; compliance must approve first."""
        vendor = {
            "name": args.legal_name,
            "tax_id": args.tax_id,
            "iban": args.iban,
            "bic": args.bic,
        }
        return await write_once(downstream.VENDORS, "create_vendor", ctx, vendor)

    @create_vendor.reconcile
    async def find_created_vendor(
        args: CreateVendorArgs, ctx: ToolContext
    ) -> dict[str, Any] | None:
        """The vendor this step created, or None if the registry has no row for its key."""
        return await asyncio.to_thread(downstream.VENDORS.find, demo_dir, _key(ctx))

    @tool("effect", idempotent=True)
    async def send_welcome_email(args: SendWelcomeEmailArgs, ctx: ToolContext) -> dict[str, Any]:
        """Queue the welcome email to the supplier's contact once the vendor record exists."""
        email = args.model_dump(include={"to_addr", "subject", "body"})
        return await write_once(downstream.OUTBOX, "send_welcome_email", ctx, email)

    return [list_documents, read_document, screen_sanctions, create_vendor, send_welcome_email]
