import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

import pytest


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """``model_dir("keras_cnn")`` -> a SavedModel built once per test session."""
    import model_zoo

    built = {}

    def build(name: str):
        if name not in built:
            path = tmp_path_factory.mktemp("models") / name
            getattr(model_zoo, name)(path)
            built[name] = path
        return built[name]

    return build


@pytest.fixture(scope="session")
def digits_model(tmp_path_factory):
    """The digits CNN (``tfopt.components.demo.digits``, seed 0, 8 epochs) and its held-out data, trained
    once per test session (per xdist worker): read only, every test that needs it shares it
    (training it took ~10 s on a quiet machine, once in each of eight files)."""
    from tfopt.components.demo.digits import train_digits_model

    return train_digits_model(tmp_path_factory.mktemp("digits"), epochs=8)


def pytest_collection_modifyitems(config, items):
    # Files holding a slow test are collected first: under xdist's loadfile they then start at
    # once on the two workers and the short files fill in around them, instead of one worker
    # running a long file alone at the end.
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)
