"""The publish step's parts (components/steps/publish.py puts them together): what is published
(:mod:`.publication`, :mod:`.run_record`), what a publish is keyed by (:mod:`.naming`), the
run (:mod:`.run_logging`), its models as MLflow Models (:mod:`.logged_models`), the registry
and the retrying client every write goes through (:mod:`.registry_protocol`), and what keeps
them single under races (:mod:`.claims`)."""
