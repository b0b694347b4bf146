"""The batched forms (compute/batched.py): A clients' models in one pass equal A per-client passes, and the
batched SGD, evaluation and ALA steps equal their vmapped per-client steps, to float rounding: a batched matrix
product or grouped convolution sums in another order than A separate ones. Measured on the CPU: at most 2.4e-7
apart (absolute, in losses and logits of a few units); compared at STEP_TOL (conftest) plus rtol 1e-5, the
relative part for the larger logits, whose rounding grows with their size."""

from __future__ import annotations

import pytest
import torch
from conftest import STEP_TOL, tol
from torch.func import functional_call, vmap

from fedala_lab.algorithms.ala import make_ala_step
from fedala_lab.algorithms.fedprox import Proximal
from fedala_lab.compute import batched
from fedala_lab.compute.steps import SGD, make_eval_step, make_sgd_step
from fedala_lab.models import MLP, FastText, ResNet18, SmallCNN

A, B = 4, 6


def _stacked(model):
    torch.manual_seed(1)
    return {k: v.detach().unsqueeze(0).repeat(A, *[1] * v.dim()) + 0.05 * torch.randn(A, *v.shape).to(v.device)
            for k, v in model.named_parameters()}


@pytest.mark.parametrize("make,shape", [(lambda: MLP(64, 5), (1, 8, 8)), (lambda: SmallCNN(1, 5, 8), (1, 8, 8)),
                                        (lambda: torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3, stride=2, padding=1),
                                                                     torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                                                     torch.nn.Flatten(), torch.nn.Linear(12, 5)),
                                         (2, 9, 9))])
def test_forward_matches_each_client_on_its_own(make, shape, device):
    model = make().to(device)
    assert batched.batchable(model)
    params = _stacked(model)
    x = torch.randn(A, B, *shape).to(device)
    got = batched.forward(model, params, x)
    for a in range(A):
        want = functional_call(model, {k: v[a] for k, v in params.items()}, (x[a],))
        torch.testing.assert_close(got[a], want, atol=tol(device, STEP_TOL), rtol=1e-5)


def test_models_without_a_batched_form_are_told_apart():
    assert not batched.batchable(ResNet18(num_classes=4, in_channels=1))  # batch norm
    assert not batched.batchable(FastText(vocab_size=10))  # embeddings
    assert not batched.batchable(torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.1)))
    assert not hasattr(make_sgd_step(ResNet18(num_classes=4, in_channels=1), SGD(0.1)), "batched")


def _batch(device="cpu"):
    torch.manual_seed(2)
    x, y = torch.randn(A, B, 1, 8, 8), torch.randint(0, 5, (A, B))
    w = torch.ones(A, B)
    w[1, 4:] = 0  # a partial batch, padded
    return x.to(device), y.to(device), w.to(device)


@pytest.mark.parametrize("sgd", [SGD(0.1), SGD(0.1, trainable=("fc.weight", "fc.bias")),
                                 SGD(0.1, objective=Proximal(0.5))])
def test_the_sgd_step_matches_its_vmapped_step(sgd, device):
    model = SmallCNN(1, 5, 8).to(device)
    step = make_sgd_step(model, sgd)
    params = _stacked(model)
    x, y, w = _batch(device)
    shared = {"global": {k: v[0] for k, v in params.items()}}
    want, want_loss = vmap(step, in_dims=(0, None, 0, 0, 0))({"params": params, "buffers": {}}, shared, x, y, w)
    got, got_loss = step.batched({"params": {k: v.clone() for k, v in params.items()}, "buffers": {}}, shared,
                                 x, y, w)
    for k in params:
        torch.testing.assert_close(got["params"][k], want["params"][k], atol=tol(device, STEP_TOL), rtol=1e-5)
    torch.testing.assert_close(got_loss, want_loss, atol=tol(device, STEP_TOL), rtol=1e-5)
    if sgd.trainable:
        assert torch.equal(got["params"]["conv1.0.weight"], params["conv1.0.weight"])


def test_an_objective_without_a_batched_form_keeps_vmap():
    class Mine:
        def grad(self, params, carry, shared):
            return {n: p.norm() * p for n, p in params.items()}  # a reduction: not elementwise

    assert not hasattr(make_sgd_step(MLP(4, 2), SGD(0.1, objective=Mine())), "batched")


def test_the_eval_and_ala_steps_match_their_vmapped_steps(device):
    model = SmallCNN(1, 5, 8).to(device)
    params = _stacked(model)
    x, y, w = _batch(device)
    ev = make_eval_step(model)
    want = vmap(ev, in_dims=(0, None, 0, 0, 0))({"params": params, "buffers": {}}, {}, x, y, w)[1]
    torch.testing.assert_close(ev.batched({"params": params, "buffers": {}}, {}, x, y, w)[1], want,
                               atol=tol(device, STEP_TOL), rtol=1e-5)
    step = make_ala_step(model, eta=1.0, head_start=0)
    top = ("fc.weight", "fc.bias")
    carry = {"w": {n: torch.rand_like(params[n]) for n in top}, "l": {n: params[n] for n in top}, "k": {},
             "buffers": {}}
    shared = {"g": {n: params[n][0] + 0.1 for n in top}, "lower": {k: v[0] for k, v in params.items() if k not in top}}
    want_w, want_loss = vmap(step, in_dims=(0, None, 0, 0, 0))(carry, shared, x, y, w)
    got_w, got_loss = step.batched(carry, shared, x, y, w)
    for n in top:
        torch.testing.assert_close(got_w["w"][n], want_w["w"][n], atol=tol(device, STEP_TOL), rtol=1e-5)
    torch.testing.assert_close(got_loss, want_loss, atol=tol(device, STEP_TOL), rtol=1e-5)


# -- Linear/ReLU chains: the backward pass written out -------------------------------------------------------


def _mlp_batch(model, device, features=64):
    params = _stacked(model)
    x, y, w = _batch(device)
    return params, x.reshape(A, B, -1)[..., :features], y, w


def _autograd(model, params, names, x, y, w, start=0):
    with torch.enable_grad():
        train = {n: params[n].detach().requires_grad_(True) for n in names}
        losses = batched.client_losses(batched.forward(model, {**params, **train}, x, start=start), y, w)
        return losses.detach(), dict(zip(names, torch.autograd.grad(losses.sum(), list(train.values()))))


@pytest.mark.parametrize("names", [None, ("fc.weight", "fc.bias"), ("fc2.0.weight", "fc.bias")])
def test_the_written_out_gradients_are_autograds_bit_for_bit(names, device):
    """What ALA's weight learning uses: the same products as autograd, in its orientation (on the CPU; a GPU's
    kernels may pick another order), the first layer's input gradient never computed."""
    model = MLP(64, 5).to(device)
    params, x, y, w = _mlp_batch(model, device)
    names = list(params) if names is None else list(names)
    layers = batched.chain(model)
    assert [type(m).__name__ for _, m in layers] == ["Flatten", "Linear", "ReLU", "Linear", "ReLU", "Linear"]
    want_loss, want = _autograd(model, params, names, x, y, w)
    got_loss, got = batched.gradients(layers, params, names, x, y, w)
    assert sorted(got) == sorted(names)
    for g, v in [(got_loss, want_loss), *((got[n], want[n]) for n in names)]:
        if device == "cpu":
            assert torch.equal(g, v)
        else:
            torch.testing.assert_close(g, v, atol=tol(device, STEP_TOL), rtol=1e-5)


def test_the_fused_sgd_update_is_autograds_step_to_float_rounding(device):
    """Local training on a chain: each weight's step folded into its gradient's product (another summation
    order); the bias steps and the losses are autograd's exactly on the CPU; untrained parameters do not move."""
    model = MLP(64, 5).to(device)
    params, x, y, w = _mlp_batch(model, device)
    names = ["fc2.0.weight", "fc2.0.bias", "fc.weight", "fc.bias"]
    want_loss, grads = _autograd(model, params, names, x, y, w)
    got = {k: v.clone() for k, v in params.items()}
    losses = batched.sgd_update(batched.chain(model), got, names, x, y, w, lr=0.1)
    if device == "cpu":
        assert torch.equal(losses, want_loss)
    for n in params:
        want = params[n] - 0.1 * grads[n] if n in grads else params[n]
        torch.testing.assert_close(got[n], want, atol=tol(device, STEP_TOL), rtol=1e-6)
    assert torch.equal(got["fc1.1.weight"], params["fc1.1.weight"])


def test_fedprox_at_mu_zero_is_fedavg_on_a_chain_exactly():
    """The oracle FedProx(μ=0) ≡ FedAvg holds through the fused step: the proximal gradient (zero) is added
    after it."""
    model = MLP(64, 5)
    params, x, y, w = _mlp_batch(model, "cpu")
    shared = {"global": {k: v[0] for k, v in params.items()}}
    out = []
    for sgd in (SGD(0.1), SGD(0.1, objective=Proximal(0.0))):
        carry = {"params": {k: v.clone() for k, v in params.items()}, "buffers": {}}
        out.append(make_sgd_step(model, sgd).batched(carry, shared, x, y, w))
    for k in params:
        assert torch.equal(out[0][0]["params"][k], out[1][0]["params"][k])


def test_chains_are_told_apart_and_their_plain_forward_is_functional_calls():
    assert batched.chain(SmallCNN(1, 5, 8)) is None  # convolutions: autograd
    assert batched.chain(MLP(64, 5), 0, 2) is None  # ends in a ReLU: not logits
    layers = batched.chain(MLP(64, 5), 0, 2, logits=False)
    assert [type(m).__name__ for _, m in layers] == ["Flatten", "Linear", "ReLU", "Linear", "ReLU"]
    model = MLP(64, 5)
    g = {k: v.detach() + 0.01 for k, v in model.named_parameters()}
    x = torch.randn(7, 1, 8, 8)
    want = functional_call(model, (g, {}), (x,), {"stop": 2})
    assert torch.equal(batched.plain_forward(layers, g, x), want)
