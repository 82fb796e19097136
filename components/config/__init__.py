"""The pipeline's YAML config, validated by typed models, and what a trigger may set in it."""
