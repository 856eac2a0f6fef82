"""What a run holds stays its own: sealing, signing, redaction and refusal of payloads."""
