"""Engine tests: SGLang's and vLLM's real structured-output classes, driven on the CPU.

They run in the optional engines environment (`make test-engines`); elsewhere each file skips
at its `pytest.importorskip`. The engines' GPU kernels are never touched: their grammar managers
are plain Python. Process-wide set-up (vLLM's platform, SGLang's torchvision placeholder) happens
inside each file, after it knows its engine is installed, so the default test run is untouched.
"""
