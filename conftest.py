import sys
from pathlib import Path

# Golden-reference generators double as the shared input factories for the tests.
sys.path.insert(0, str(Path(__file__).parent / "tests" / "golden"))

pytest_plugins = ["pytester"]
