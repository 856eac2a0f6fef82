"""One scrubber for the text of failures and spans: no credentials, no quoted request bodies.

A transport's error names the URL it called, with any `user:password@` or `?api_key=` in it, and
some clients quote the request body they sent; failure messages reach history (encrypted only
with keys set), the Web UI and spans. `ScrubbingFailureConverter` passes every failure Temporal
records through `scrub`, and `waypoint._operations.tracing` every span's text.
"""

from __future__ import annotations

import dataclasses
import re

from temporalio.api.failure.v1 import Failure
from temporalio.client import Client
from temporalio.converter import (
    DefaultFailureConverter,
    DefaultFailureConverterWithEncodedAttributes,
    PayloadConverter,
)

HIDDEN = "***"
_USERINFO = re.compile(r"\b([a-z][a-z0-9+.-]*://)[^/\s@'\"]+@", re.IGNORECASE)
_SECRET_PARAM = re.compile(
    r"([?&;](?:api[_-]?key|key|token|access[_-]?token|auth|password|passwd|secret|sig|signature)=)"
    r"[^&;\s'\"]+",
    re.IGNORECASE,
)
_BODY = re.compile(
    r"""(\b(?:request[ _])?(?:body|content|data|json)\s*[=:]\s*)"""
    r"""(b?'(?:[^'\\]|\\.)*'|b?"(?:[^"\\]|\\.)*"|[{\[].*)""",  # a JSON body: to the end
    re.IGNORECASE | re.DOTALL,
)


def scrub(text: str) -> str:
    """`text` with URL credentials, secret query parameters and quoted bodies replaced."""
    if not text:
        return text
    text = _USERINFO.sub(rf"\1{HIDDEN}@", text)
    text = _SECRET_PARAM.sub(rf"\1{HIDDEN}", text)
    return _BODY.sub(r"\1<body withheld>", text)


class ScrubbingFailureConverter(DefaultFailureConverter):
    """Temporal's failure converter, each failure's message and stack trace scrubbed first."""

    encode = False
    """Then move them into an encoded attribute, which a codec encrypts (with keys set)."""

    def __init__(self) -> None:
        super().__init__(encode_common_attributes=False)

    def to_failure(
        self, exception: BaseException, payload_converter: PayloadConverter, failure: Failure
    ) -> None:
        """See base class; a cause is converted (and scrubbed) by its own call."""
        super().to_failure(exception, payload_converter, failure)
        failure.message = scrub(failure.message)
        failure.stack_trace = scrub(failure.stack_trace)
        if self.encode:
            attributes = {"message": failure.message, "stack_trace": failure.stack_trace}
            failure.encoded_attributes.CopyFrom(payload_converter.to_payloads([attributes])[0])
            failure.message = "Encoded failure"
            failure.stack_trace = ""


class EncodedScrubbingFailureConverter(ScrubbingFailureConverter):
    """`ScrubbingFailureConverter` that moves the text where the codec encrypts it."""

    encode = True


def scrubbing(client: Client) -> Client:
    """`client`, on the same connection, recording failures through the scrubbing converter.

    A worker records failures with its client's converter; one connected with Temporal's own
    (as a user's may be) is given ours, encoding the text as before. A converter of the user's
    own kind is left alone. Built from the client's initial config, so plugins apply as before.
    """
    config = client.config()
    converter = config["data_converter"]
    failures = converter.failure_converter
    if type(failures) not in (
        DefaultFailureConverter,
        DefaultFailureConverterWithEncodedAttributes,
    ):
        return client
    encoded = bool(getattr(failures, "_encode_common_attributes", False))
    kind = EncodedScrubbingFailureConverter if encoded else ScrubbingFailureConverter
    scrubbed = dataclasses.replace(converter, failure_converter_class=kind)
    return Client(**{**config, "data_converter": scrubbed})
