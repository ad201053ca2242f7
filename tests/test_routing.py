import pytest
import torch

from capsnotes import DynamicRouting, dynamic_routing, dynamic_routing_with_couplings, squash
from capsnotes.experiments.mistakes import routing_over_children


def loop_routing(u_hat: torch.Tensor, iterations: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Procedure 1 written with explicit Python loops, as an independent reference."""
    batch, n_in, n_out, _ = u_hat.shape
    v = c = None
    outputs, couplings = [], []
    for b in range(batch):
        logits = [[0.0] * n_out for _ in range(n_in)]
        for r in range(iterations):
            c = torch.tensor(logits, dtype=u_hat.dtype).softmax(dim=1)  # over parents
            s = torch.stack(
                [sum(c[i, j] * u_hat[b, i, j] for i in range(n_in)) for j in range(n_out)]
            )
            v = squash(s)
            if r + 1 < iterations:
                for i in range(n_in):
                    for j in range(n_out):
                        logits[i][j] += float(u_hat[b, i, j] @ v[j])
        outputs.append(v)
        couplings.append(c)
    return torch.stack(outputs), torch.stack(couplings)


def test_shapes():
    u_hat = torch.randn(5, 12, 4, 6)
    v = dynamic_routing(u_hat)
    assert v.shape == (5, 4, 6)
    v2, c = dynamic_routing_with_couplings(u_hat)
    assert c.shape == (5, 12, 4)
    torch.testing.assert_close(v, v2)


@pytest.mark.parametrize("iterations", [1, 2, 3, 5])
def test_matches_explicit_loops(iterations):
    u_hat = torch.randn(3, 5, 4, 3, dtype=torch.float64)
    v, c = dynamic_routing_with_couplings(u_hat, iterations)
    v_ref, c_ref = loop_routing(u_hat, iterations)
    torch.testing.assert_close(v, v_ref)
    torch.testing.assert_close(c, c_ref)


def test_hand_computed_two_children_two_parents():
    # Child 0 votes (1, 0) for parent 0 and (0, 1) for parent 1; child 1 votes (1, 0) for
    # both. With uniform coupling s_0 = (1, 0), s_1 = (0.5, 0.5).
    u_hat = torch.tensor(
        [[[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [1.0, 0.0]]]], dtype=torch.float64
    )
    v1 = dynamic_routing(u_hat, iterations=1)
    torch.testing.assert_close(v1[0, 0], torch.tensor([0.5, 0.0], dtype=torch.float64))  # 1/(1+1)
    r = 0.5 / 1.5 / 0.5**0.5  # ‖s_1‖² = 0.5 -> scale 0.5/1.5/sqrt(0.5)
    torch.testing.assert_close(v1[0, 1], torch.tensor([0.5 * r, 0.5 * r], dtype=torch.float64))
    # Agreement: b_00 = 0.5, b_01 = 0.5 r, b_10 = 0.5, b_11 = 0.5 r
    _, c2 = dynamic_routing_with_couplings(u_hat, iterations=2)
    p = torch.tensor([0.5, 0.5 * r], dtype=torch.float64).softmax(0)
    torch.testing.assert_close(c2[0, 0], p)
    torch.testing.assert_close(c2[0, 1], p)


def test_couplings_sum_to_one_over_parents():
    u_hat = torch.randn(4, 30, 10, 16)
    for iterations in (1, 2, 3):
        _, c = dynamic_routing_with_couplings(u_hat, iterations)
        torch.testing.assert_close(c.sum(dim=2), torch.ones(4, 30))


def test_the_sum_check_catches_the_wrong_axis():
    u_hat = torch.randn(4, 30, 10, 16)
    _, c = routing_over_children(u_hat, 3)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(c.sum(dim=2), torch.ones(4, 30))


def test_one_iteration_is_uniform_coupling():
    u_hat = torch.randn(2, 7, 3, 4)
    v, c = dynamic_routing_with_couplings(u_hat, iterations=1)
    torch.testing.assert_close(c, torch.full_like(c, 1 / 3))
    # s_j = Σ_i (1/3) û_{j|i}
    torch.testing.assert_close(v, squash(u_hat.sum(dim=1) / 3))


def test_couplings_become_non_uniform_after_agreement():
    u_hat = torch.randn(2, 20, 5, 8)
    _, c = dynamic_routing_with_couplings(u_hat, iterations=2)
    assert (c - 1 / 5).abs().max() > 1e-3


def test_agreement_moves_coupling_towards_agreeing_parent():
    # Every child votes the same vector for parent 0 and random noise for the others.
    torch.manual_seed(1)
    u_hat = torch.randn(1, 50, 4, 8) * 0.1
    u_hat[:, :, 0] = torch.ones(8)
    _, c1 = dynamic_routing_with_couplings(u_hat, 1)
    _, c3 = dynamic_routing_with_couplings(u_hat, 3)
    assert (c3[0, :, 0] > c1[0, :, 0]).all()


def test_one_example_does_not_depend_on_the_rest_of_the_batch():
    u_hat = torch.randn(6, 20, 5, 8, dtype=torch.float64)
    together = dynamic_routing(u_hat)
    for b in range(6):
        alone = dynamic_routing(u_hat[b : b + 1])
        torch.testing.assert_close(together[b : b + 1], alone)
    other = u_hat.clone()
    other[1:] = torch.randn_like(other[1:]) * 5
    torch.testing.assert_close(dynamic_routing(other)[0], together[0])


def test_accepts_non_contiguous_votes():
    base = torch.randn(3, 5, 12, 6)
    u_hat = base.transpose(1, 2)  # [3, 12, 5, 6], not contiguous
    torch.testing.assert_close(dynamic_routing(u_hat), dynamic_routing(u_hat.contiguous()))


def test_gradcheck_float64():
    u_hat = torch.randn(2, 6, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda u: dynamic_routing(u, 3), (u_hat,))
    assert torch.autograd.gradcheck(lambda u: dynamic_routing_with_couplings(u, 2)[1], (u_hat,))


def test_module_form():
    u_hat = torch.randn(2, 6, 3, 4)
    torch.testing.assert_close(DynamicRouting(2)(u_hat), dynamic_routing(u_hat, 2))


def test_bad_iterations():
    for bad, error in ((0, ValueError), (2.0, TypeError), (True, TypeError)):
        with pytest.raises(error, match="routing iterations must be"):
            DynamicRouting(bad)
