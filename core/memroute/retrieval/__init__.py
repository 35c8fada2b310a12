"""Retrieval: the keyword, vector and hybrid legs, fusion and the token budget."""

from memroute.retrieval.budget import fit_budget
from memroute.retrieval.engine import RetrievalEngine

__all__ = ["RetrievalEngine", "fit_budget"]
