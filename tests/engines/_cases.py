"""Requests both engine suites send."""

from __future__ import annotations

import json

# vLLM's structured-outputs docs: a structural tag in the older form
TAG = json.dumps(
    {
        "type": "structural_tag",
        "structures": [
            {
                "begin": "<function=get_weather>",
                "schema": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
                "end": "</function>",
            }
        ],
        "triggers": ["<function="],
    }
)
