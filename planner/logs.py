"""Quiet by default: what the entry points (scripts/) print.

The engines log every step at INFO (vLLM prints hundreds of lines while it starts and serves) and
transformers draws a "Writing model shards" bar at every save. A script calls
`configure_logging(verbose)` once at start: our own warnings and errors, and the libraries' errors only,
unless `--verbose` (the libraries warn about what a user cannot act on, such as transformers' "layers were
not sharded" for a CPU model). It changes process-wide logging, so it is for entry points, not for
library code.
"""

from __future__ import annotations

import logging
import os

__all__ = ["configure_logging", "NOISY_LOGGERS"]

NOISY_LOGGERS = ("vllm", "transformers", "torch", "ray", "datasets", "huggingface_hub", "urllib3")
"""Libraries whose INFO messages are hidden unless verbose."""


def configure_logging(verbose: bool = False) -> None:
    """Our warnings and errors and the libraries' errors (verbose=False), or everything at INFO with the
    libraries' progress bars."""
    level = logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    # vLLM's engine processes read this when they start; the loggers below cover this process. Quiet,
    # vLLM's worker would warn "RotaryEmbedding: Failed to load weights" at every weight push, about a
    # buffer that has no weights to load.
    library_level = level if verbose else logging.ERROR
    os.environ["VLLM_LOGGING_LEVEL"] = logging.getLevelName(library_level)
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(library_level)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity(library_level)
    (hf_logging.enable_progress_bar if verbose else hf_logging.disable_progress_bar)()
