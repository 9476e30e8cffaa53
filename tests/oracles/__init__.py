"""Independent validators the tests check structgen's output against (see `ajv.py`)."""
