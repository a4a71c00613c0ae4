"""StepLR and CosineAnnealingLR (optim/lr_scheduler.py): torch's learning rates step by step, with two
parameter groups, over 30 steps (past T_max, where the cosine climbs again), and saving and resuming."""
import math

import numpy as np
import pytest

import tinygrad_gpu as tg
from tinygrad_gpu.optim import SGD
from tinygrad_gpu.optim.lr_scheduler import CosineAnnealingLR, StepLR

STEPS = 30
SCHEDULES = {   # name -> (ours, torch's), each from an optimizer
    "StepLR": (lambda o: StepLR(o, step_size=4), lambda torch, o: torch.optim.lr_scheduler.StepLR(o, step_size=4)),
    "StepLR-gamma": (lambda o: StepLR(o, 3, gamma=0.5),
                     lambda torch, o: torch.optim.lr_scheduler.StepLR(o, 3, gamma=0.5)),
    "CosineAnnealingLR": (lambda o: CosineAnnealingLR(o, T_max=10),
                          lambda torch, o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=10)),
    "CosineAnnealingLR-eta_min": (lambda o: CosineAnnealingLR(o, 7, eta_min=0.01),
                                  lambda torch, o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 7, eta_min=0.01)),
}


def our_optimizer():
    return SGD([{"params": [tg.nn.Parameter(tg.zeros(2))], "lr": 0.5},
                {"params": [tg.nn.Parameter(tg.zeros(1))], "lr": 0.02}], lr=0.5, momentum=0.9)


def lrs(scheduler, optimizer, steps=STEPS):
    """The lr of every group before each optimizer step, stepping as a training loop does."""
    seen = []
    for _ in range(steps):
        seen.append(scheduler.get_last_lr())
        assert seen[-1] == [g["lr"] for g in optimizer.param_groups]
        optimizer.step()
        scheduler.step()
    return np.array(seen)


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_matches_torch_step_by_step(name):
    torch = pytest.importorskip("torch")
    make_ours, make_theirs = SCHEDULES[name]
    optimizer = our_optimizer()
    ours = lrs(make_ours(optimizer), optimizer)
    theirs_optimizer = torch.optim.SGD([{"params": [torch.nn.Parameter(torch.zeros(2))], "lr": 0.5},
                                        {"params": [torch.nn.Parameter(torch.zeros(1))], "lr": 0.02}],
                                       lr=0.5, momentum=0.9)
    scheduler = make_theirs(torch, theirs_optimizer)
    theirs = []
    for _ in range(STEPS):
        theirs.append(scheduler.get_last_lr())
        theirs_optimizer.step()
        scheduler.step()
    # torch updates recursively from the previous lr, we use the closed form: equal to rounding
    np.testing.assert_allclose(ours, np.array(theirs), rtol=1e-12, atol=1e-15)


def test_step_lr_by_formula():
    optimizer = our_optimizer()
    seen = lrs(StepLR(optimizer, step_size=4, gamma=0.1), optimizer, 13)
    expected = [0.5 * 0.1 ** (k // 4) for k in range(13)]
    np.testing.assert_allclose(seen[:, 0], expected, rtol=1e-15)
    np.testing.assert_allclose(seen[:, 1], np.array(expected) * 0.04, rtol=1e-15)
    assert seen[3, 0] == 0.5 and seen[4, 0] == pytest.approx(0.05)


def test_cosine_by_formula_reaches_eta_min_at_t_max_and_climbs_back():
    optimizer = our_optimizer()
    seen = lrs(CosineAnnealingLR(optimizer, T_max=10, eta_min=0.1), optimizer, 21)[:, 0]
    assert seen[0] == 0.5 and seen[10] == pytest.approx(0.1, abs=1e-15) and seen[20] == pytest.approx(0.5)
    assert seen[5] == pytest.approx(0.3)                       # half way down: the mean of the ends
    assert np.all(np.diff(seen[:11]) < 0) and np.all(np.diff(seen[10:]) > 0)
    for t in range(21):
        assert seen[t] == pytest.approx(0.1 + 0.4 * (1 + math.cos(math.pi * t / 10)) / 2, rel=1e-14)


@pytest.mark.parametrize("make", [lambda o: StepLR(o, 3, 0.5), lambda o: CosineAnnealingLR(o, 8, 0.01)])
def test_state_dict_resumes_the_schedule(make):
    optimizer = our_optimizer()
    whole = lrs(make(optimizer), optimizer, 12)
    first = our_optimizer()
    scheduler = make(first)
    lrs(scheduler, first, 5)
    saved = scheduler.state_dict()
    resumed_optimizer = our_optimizer()
    resumed = make(resumed_optimizer)
    resumed.load_state_dict(saved)
    np.testing.assert_array_equal(lrs(resumed, resumed_optimizer, 7), whole[5:])


def test_bad_arguments_are_named():
    for bad in (0, -2, 1.5):
        with pytest.raises(ValueError, match="StepLR: step_size must be a positive int"):
            StepLR(our_optimizer(), step_size=bad)
    with pytest.raises(ValueError, match="CosineAnnealingLR: T_max must be a positive number of steps, got 0"):
        CosineAnnealingLR(our_optimizer(), T_max=0)
