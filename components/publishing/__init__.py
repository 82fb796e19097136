"""The publish step's parts (components/steps/publish.py puts them together): what is published
(:mod:`.publication`, :mod:`.run_record`), the run (:mod:`.run_logging`), its models as MLflow
Models (:mod:`.logged_models`), the registry (:mod:`.registry_protocol`), and what keeps them
single under retries and races (:mod:`.claims`, :mod:`.race_tolerant_client`)."""
