"""Orchestrators: the Airflow tasks, Kubernetes pods, the Kubeflow pipeline, and the image's entrypoint."""
