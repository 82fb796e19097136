from tfopt.components.cli import entry_point

entry_point()
