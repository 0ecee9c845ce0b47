import numpy as np
import pytest

from llm_policy_gen.collect import Episode
from llm_policy_gen.memory import ExperienceMemory


def ep(states, actions, rewards, terminated=True, truncated=False, seed=0, iteration=0):
    return Episode(seed, np.array(states), np.array(actions), np.array(rewards, dtype=float), terminated, truncated,
                   iteration)


def test_best_and_worst_selection():
    m = ExperienceMemory(4, 2)
    m.add([ep([0], [0], [r], seed=i) for i, r in enumerate([5, 1, 9, 3, 9])])
    assert [e.ret for e in m.best(2)] == [9, 9]
    assert m.best(1)[0].seed == 4  # newest first among ties
    assert [e.ret for e in m.worst(1)] == [1]


def test_capacity_drops_oldest_but_keeps_best():
    m = ExperienceMemory(4, 2, capacity=3, keep_best=1)
    m.add([ep([0], [0], [100], seed=0)])
    m.add([ep([0], [0], [1], seed=i) for i in range(1, 6)])
    assert len(m) == 3
    assert m.best(1)[0].seed == 0


def test_evidence_discounted_return_to_go_and_transitions():
    m = ExperienceMemory(3, 2, gamma=0.5)
    m.add([ep([0, 1, 2], [1, 0, 1], [1, 1, 1], terminated=True)])
    ev = m.evidence()
    # G_2 = 1, G_1 = 1 + 0.5 = 1.5, G_0 = 1 + 0.75 = 1.75
    assert ev.q_mean[0, 1] == pytest.approx(1.75)
    assert ev.q_mean[1, 0] == pytest.approx(1.5)
    assert ev.q_mean[2, 1] == pytest.approx(1.0)
    assert np.isnan(ev.q_mean[0, 0])
    assert ev.visits.tolist() == [1, 1, 1]
    assert ev.transitions[0, 1, 1] == 1 and ev.transitions[1, 0, 2] == 1
    assert ev.transitions[2, 1, 3] == 1  # terminal column


def test_truncated_tail_is_not_averaged():
    m = ExperienceMemory(2, 2, gamma=0.5)
    m.add([ep([0] * 10, [1] * 10, [1] * 10, terminated=False, truncated=True)])
    ev = m.evidence(horizon=4)
    assert ev.counts[0, 1] == 6 and ev.visits[0] == 10
