"""rocmfleet: take bare AMD Instinct MI300X servers to a fleet serving LLMs with vLLM.

The package holds the logic (configuration models, argument and file rendering, facts and
operations); ``roles/`` call pyinfra operations with what it computes.
"""

__version__ = "0.1.0"
