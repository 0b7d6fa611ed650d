"""The search engine: policy backends, the search tree, strategies, scorers, budgets and solve()."""

import runpy as _runpy
from pathlib import Path as _Path

# Another distribution may provide `planner`, `rl` or `verifiers` as well: fail here, naming it and the fix
# (verifiers/provenance.py, run from its file because the name `verifiers` may be the other one's).
_runpy.run_path(str(_Path(__file__).resolve().parents[1] / "verifiers" / "provenance.py"))["check_packages"]()
del _runpy, _Path

from planner.budget import Budget, ComputeRecord
from planner.likelihood import LikelihoodVerifier
from planner.policy import ComputeStats, Policy, Sample, SamplingParams, load_policy
from planner.monte_carlo import MonteCarloScorer
from planner.prm_scorers import (PRM_FORMATS, MathShepherdScorer, QwenPRMScorer, SequenceRewardScorer, TokenValueScorer,
                                 load_scorer)
from planner.scorers import AGGREGATIONS, ConfidenceScorer, ModelScorer, OutcomeScorer, Scorer, VerifierOracleScorer
from planner.solve import Solution, solve, solve_batch
from planner.strategies import (CONFIGS, STRATEGIES, BeamConfig, BestOfNConfig, BudgetForcingConfig, DVTSConfig,
                                MCTSConfig, SearchResult)
from planner.tree import NO_PARENT, ROOT, SearchTree, Trajectory

__all__ = [
    "load_policy", "Policy", "Sample", "SamplingParams", "ComputeStats",
    "SearchTree", "Trajectory", "ROOT", "NO_PARENT",
    "STRATEGIES", "CONFIGS", "BestOfNConfig", "BeamConfig", "DVTSConfig", "MCTSConfig", "BudgetForcingConfig",
    "SearchResult", "Scorer", "ModelScorer", "ConfidenceScorer", "MonteCarloScorer", "OutcomeScorer",
    "VerifierOracleScorer", "LikelihoodVerifier",
    "AGGREGATIONS", "PRM_FORMATS", "MathShepherdScorer", "QwenPRMScorer", "SequenceRewardScorer", "TokenValueScorer",
    "load_scorer", "Budget", "ComputeRecord", "solve", "solve_batch", "Solution",
]
