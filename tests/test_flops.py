import dataclasses

from capsnotes import CapsNetConfig
from capsnotes.flops import layer_costs, training_flops_per_image


def test_paper_model_costs_by_hand():
    costs = {layer.name: layer for layer in layer_costs()}
    assert costs["conv1"].forward_macs == 20 * 20 * 256 * 81  # 8,294,400
    assert costs["primary capsules"].forward_macs == 6 * 6 * 256 * 256 * 81  # 191,102,976
    assert costs["votes"].forward_macs == 1152 * 10 * 16 * 8
    assert costs["routing"].forward_macs == 5 * 1152 * 10 * 16  # 3 sums + 2 agreements
    assert costs["decoder"].forward_macs == 160 * 512 + 512 * 1024 + 1024 * 784
    assert training_flops_per_image() == 1_202_626_560
    share = costs["primary capsules"].training_flops / training_flops_per_image()
    assert 0.95 < share < 0.96


def test_costs_follow_the_configuration():
    one_pass = dataclasses.replace(CapsNetConfig(), routing_iterations=1)
    routing = {layer.name: layer for layer in layer_costs(one_pass)}["routing"]
    assert routing.forward_macs == 1152 * 10 * 16
    multi = {layer.name: layer for layer in layer_costs(CapsNetConfig(image_size=36))}
    assert multi["primary capsules"].forward_macs == 10 * 10 * 256 * 256 * 81
