"""Everything Anthropic-specific: the client, request building, conversion, errors, limits.

Anthropic's SDK types never leave this package: the rest of Waypoint sees its own models. The
package itself imports nothing, so reading the worker's settings (`backends`) or the model
catalog (`catalog`) does not load the SDK: import what you need from its module
(`provider.AnthropicModel`, `client.build_client`, `errors.to_application_error`).
"""
