import numpy as np

from llm_policy_gen.collect import Collector
from llm_policy_gen.envs import get_spec
from llm_policy_gen.keeper import Keeper


def make(eval_start=3, eval_max=5, rise_every=2):
    spec = get_spec("CartPole-v1")
    c = Collector(spec)
    return spec, c, Keeper(c, spec.default_table(), seed=0, eval_start=eval_start, eval_max=eval_max,
                           rise_every=rise_every)


def test_schedule_rises_from_start_to_max():
    _, _, k = make()
    assert [k.n_eval(i) for i in range(1, 9)] == [3, 3, 4, 4, 5, 5, 5, 5]
    assert k.seeds(3) == k.seeds(1) + [k.seeds(3)[-1]]  # the added seed extends the same list


def test_better_candidate_is_adopted_worse_is_reverted():
    spec, c, k = make()
    good = spec.prior_table()
    d = k.consider(good, 1)
    assert d.accepted and np.array_equal(k.best_table, good) and k.best_iteration == 1
    assert d.eval_mean > 100 and len(d.eval_returns) == 3
    bad = spec.default_table()
    d2 = k.consider(bad, 2)
    assert not d2.accepted and np.array_equal(k.best_table, good)
    assert d2.best_eval_mean == d.eval_mean
    c.close()


def test_equal_candidate_is_not_adopted_and_best_is_rescored_on_added_seeds():
    spec, c, k = make()
    k.consider(spec.prior_table(), 1)
    d = k.consider(spec.prior_table(), 3)  # 4 seeds now: the best runs only the added one
    assert not d.accepted
    assert d.episodes_used == 4 + 1
    expected = c.evaluate(spec.prior_table(), k.seeds(3)).mean
    assert d.best_eval_mean == expected
    c.close()
