"""Cluster description: TF_CONFIG build/validate, cluster sources, launcher."""
