"""GATuner: a genetic algorithm over knob indices (TVM's ``autotvm/tuner/ga_tuner.py``).

A gene is one entity index per knob (``ConfigSpace.point2knob``).  Each generation of
``pop_size`` genes is measured; then the ``elite_num`` best genes seen survive, parents are
drawn with probability proportional to their GFLOP/s, one-point crossover and per-knob
mutation (probability ``mutation_prob``) make the next generation, and any child that was
already proposed is mutated again until it is new, so no config is measured twice.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scheduler_core.measure.data import MeasureErrorNo

from .tuner import Tuner


class GATuner(Tuner):
    """Genetic tuner.  pop_size: genes per generation; elite_num: best genes kept as parents;
    mutation_prob: probability that a knob of a child is redrawn; seed: seeds every draw.
    Raises ValueError for pop_size < 1, elite_num < 0 or mutation_prob outside [0, 1]."""

    def __init__(self, task: Any, pop_size: int = 100, elite_num: int = 3, mutation_prob: float = 0.1,
                 seed: int | None = None):
        super().__init__(task)
        if int(pop_size) < 1 or int(elite_num) < 0 or not 0.0 <= float(mutation_prob) <= 1.0:
            raise ValueError(f"GATuner needs pop_size >= 1, elite_num >= 0 and 0 <= mutation_prob <= 1; got "
                             f"{pop_size}, {elite_num}, {mutation_prob}")
        self.rng = np.random.default_rng(seed)
        self.dims = self.space.dims
        self.n = len(self.space)
        self.pop_size = min(int(pop_size), self.n)
        self.elite_num = min(self.pop_size, int(elite_num))
        self.mutation_prob = float(mutation_prob)
        self.proposed: set = set()
        self.genes: list = []
        self.scores: list = []
        self.elites: list = []
        self.elite_scores: list = []
        self.trial_pt = 0
        while len(self.genes) < self.pop_size:
            self.genes.append(self._new_gene(self.space.point2knob(int(self.rng.integers(self.n)))))

    def _new_gene(self, gene: list) -> list:
        """``gene``, mutated one knob at a time until its index was never proposed; recorded as proposed."""
        tries = 0
        while self.space.knob2point(gene) in self.proposed:
            tries += 1
            if tries > 64:  # nearly exhausted space: any unproposed index
                gene = self.space.point2knob(int(self.rng.integers(self.n)))
                continue
            j = int(self.rng.integers(len(self.dims)))
            gene[j] = int(self.rng.integers(self.dims[j]))
        self.proposed.add(self.space.knob2point(gene))
        return gene

    def has_next(self) -> bool:
        return self.trial_pt < len(self.genes) or len(self.proposed) < self.n

    def next_batch(self, batch_size: int) -> list:
        out: list = []
        while len(out) < batch_size and self.trial_pt < len(self.genes):
            out.append(self.space.get(self.space.knob2point(self.genes[self.trial_pt])))
            self.trial_pt += 1
        return out

    def update(self, inputs: list, results: list) -> None:
        for inp, res in zip(inputs, results):
            ok = res.error_no == MeasureErrorNo.NO_ERROR and res.cost
            self.scores.append(inp.task.flop / res.cost if ok else 0.0)
        if len(self.scores) < len(self.genes) or len(self.proposed) >= self.n:
            return
        genes = self.genes + self.elites
        scores = np.array(self.scores[:len(self.genes)] + self.elite_scores, dtype=np.float64)
        keep = np.argsort(-scores, kind="stable")[:self.elite_num]
        self.elites = [list(genes[k]) for k in keep]
        self.elite_scores = [float(scores[k]) for k in keep]
        probs = scores + 1e-8
        probs = probs / probs.sum()
        children = []
        for _ in range(self.pop_size):
            if len(self.proposed) >= self.n:
                break
            if len(genes) > 1:
                a, b = self.rng.choice(len(genes), size=2, replace=False, p=probs)
            else:
                a = b = 0
            point = int(self.rng.integers(len(self.dims)))
            child = list(genes[a][:point]) + list(genes[b][point:])
            for j, dim in enumerate(self.dims):
                if self.rng.random() < self.mutation_prob:
                    child[j] = int(self.rng.integers(dim))
            children.append(self._new_gene(child))
        self.genes, self.scores, self.trial_pt = children, [], 0


__all__ = ["GATuner"]
