"""The pipeline: its step table, the records steps hand on, the workspace that makes reruns cheap,
and the one-process runner behind `tfopt run`."""
