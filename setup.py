"""Build the optional C trie walk, regex subset construction, Earley inner loops and schema data
check; everything else is configured in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "structgen.masks._native",
            sources=["structgen/masks/_native.c"],
            extra_compile_args=["-O3"],
            optional=True,  # without a C compiler structgen falls back to its numpy walker
        ),
        Extension(
            "structgen.automata._subset",
            sources=["structgen/automata/_subset.c", "structgen/automata/_thompson.c"],
            extra_compile_args=["-O3"],
            optional=True,  # without it regex DFA rows are built in Python
        ),
        Extension(
            "structgen.grammar._earley",
            sources=["structgen/grammar/_earley.c"],
            extra_compile_args=["-O3"],
            optional=True,  # without it Earley sets are built in Python
        ),
        Extension(
            "structgen._json_native",
            sources=["structgen/_json_native.c"],
            extra_compile_args=["-O3"],
            optional=True,  # without it a schema's data is checked and copied in Python
        ),
    ]
)
