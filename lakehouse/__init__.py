"""A lambda-style lakehouse: a Structured Streaming speed layer and a batch layer that share one
pipeline definition, Delta tables, and a serving view that prefers batch results."""
