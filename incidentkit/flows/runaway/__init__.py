"""Runaway model calls (seed 003): model calls per invocation, a ``maxLlmCalls`` set from data,
and the loop that burned them.

Work in progress toward the full flow (issue "Runaway calls flow"). Its pure steps so far:
``counts`` (model calls per invocation from each source, cross-checked), ``signatures`` (the
three loop signatures) and ``limits`` (limit hits, the configured limit, the recommendation).
The findings, notebook and registry entry come with the rest of the flow.
"""
