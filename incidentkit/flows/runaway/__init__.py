"""Runaway model calls (seed 003): model calls per invocation, a ``maxLlmCalls`` set from data,
and the loop that burned them.

Work in progress toward the full flow (issue "Runaway calls flow"): ``counts`` (model calls per
invocation from each source, cross-checked) and ``signatures`` (the three loop signatures) are
its pure steps; the findings, notebook and registry entry come with the rest of the flow.
"""
