from llama_index_car.hypothesizers.base import BaseCriterionHypothesizer, CriterionHypothesis

__all__ = ["BaseCriterionHypothesizer", "CriterionHypothesis"]
