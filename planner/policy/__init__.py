"""The one policy interface (see planner/policy/base.py) and its backends."""

from planner.policy.base import Policy
from planner.policy.types import ComputeStats, Sample, SamplingParams

__all__ = ["Policy", "Sample", "SamplingParams", "ComputeStats"]
