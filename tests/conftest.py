"""Shared fixtures for the numerical tests of the DAS3 plant (``sim``)."""
import pytest

from sim.config import ModelConfig
from sim.model import load_model


@pytest.fixture(scope="session")
def model():
    """The published DAS3 model (hand weightless, as in the release)."""
    return load_model()


@pytest.fixture(scope="session")
def model_hw():
    """The DAS3 model with the hand's weight switched on (``ModelConfig.hand_weight``)."""
    return load_model(ModelConfig(hand_weight=True))
