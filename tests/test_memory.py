import numpy as np
import pytest

from llm_policy_gen.collect import Episode
from llm_policy_gen.prompting.memory import ExperienceMemory, episodes_from_state, episodes_state


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


def test_episodes_get_running_uids_and_since_finds_the_new_ones():
    m = ExperienceMemory(4, 2, capacity=3, keep_best=1)
    m.add([ep([0], [0], [r], seed=i) for i, r in enumerate([5, 1, 2])])
    assert [e.uid for e in m.episodes] == [0, 1, 2] and m.added == 3
    m.add([ep([1], [1], [0], seed=9), ep([2], [0], [0], seed=10)])  # drops the oldest that is not the best
    assert [e.uid for e in m.episodes] == [0, 3, 4] and m.added == 5
    assert [e.seed for e in m.since(3)] == [9, 10] and m.since(5) == []
    assert [e.uid for e in m.since(1)] == [3, 4]  # uids 1 and 2 are gone


def test_state_round_trip_keeps_episodes_uids_and_evidence():
    rng = np.random.default_rng(0)
    m = ExperienceMemory(5, 3, capacity=6, gamma=0.9)
    for i in range(9):
        n = int(rng.integers(1, 12))
        m.add([ep(rng.integers(0, 5, n), rng.integers(0, 3, n), rng.normal(size=n), terminated=bool(i % 2),
                  truncated=not i % 2, seed=100 + i, iteration=i)])
    m.add([ep([], [], [], seed=7)])  # an empty episode survives too
    again = ExperienceMemory(5, 3, capacity=6, gamma=0.9)
    again.load_state_dict(m.state_dict())
    assert again.added == m.added and len(again) == len(m)
    for a, b in zip(m.episodes, again.episodes, strict=True):
        assert (a.seed, a.uid, a.iteration, a.terminated, a.truncated) == (b.seed, b.uid, b.iteration, b.terminated,
                                                                           b.truncated)
        assert np.array_equal(a.states, b.states) and np.array_equal(a.actions, b.actions)
        assert np.array_equal(a.rewards, b.rewards)
    ea, eb = m.evidence(), again.evidence()
    assert np.array_equal(ea.visits, eb.visits) and np.array_equal(ea.counts, eb.counts)
    assert np.array_equal(ea.q_mean, eb.q_mean, equal_nan=True) and np.array_equal(ea.transitions, eb.transitions)
    assert [e.uid for e in again.best(2)] == [e.uid for e in m.best(2)]
    again.add([ep([0], [0], [0])])
    assert again.episodes[-1].uid == m.added  # numbering goes on where it stopped


def test_episode_arrays_round_trip():
    eps = [ep([0, 1], [1, 0], [0.5, 1.5], seed=3, iteration=2), ep([2], [1], [-1.0], terminated=False,
                                                                   truncated=True, seed=4, iteration=2)]
    eps[0].uid, eps[1].uid = 10, 11
    back = episodes_from_state(episodes_state(eps))
    assert [(e.seed, e.uid, e.ret, e.length, e.truncated) for e in back] == [(3, 10, 2.0, 2, False),
                                                                            (4, 11, -1.0, 1, True)]
    assert episodes_from_state(episodes_state([])) == []
