"""Audits: stream-vs-batch reconciliation, data-quality suites, and the HTML report."""
