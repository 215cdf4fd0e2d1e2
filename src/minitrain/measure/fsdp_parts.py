"""Notebook 19's two small examples, in this process, no group: a buffer's memory let go and given back while views of
it stay, and the four module hooks FSDP's schedule is made of, in the order they run."""

import torch
from torch import nn


def views_demo() -> str:
    """A buffer, a 2x2 view of it; the buffer's storage resized to 0 bytes, then back and refilled: the view reads the
    new values (FSDP frees a unit's gathered parameters this way, and gathers them again)."""
    buffer = torch.arange(6.0)
    view = buffer[:4].view(2, 2)
    lines = [f"buffer {buffer.tolist()}, its storage {buffer.untyped_storage().nbytes()} bytes; view {view.tolist()}"]
    buffer.untyped_storage().resize_(0)
    lines.append(f"resize_(0): storage {buffer.untyped_storage().nbytes()} bytes; the view's shape {tuple(view.shape)} "
                 "stays (reading it now would fail)")
    buffer.untyped_storage().resize_(6 * buffer.element_size())
    buffer.copy_(torch.arange(6.0) * 10)
    lines.append(f"resize_ back and copy_: storage {buffer.untyped_storage().nbytes()} bytes; view {view.tolist()}")
    return "\n".join(lines)


def hooks_demo() -> str:
    """A 2-layer model whose layers each print when their four hooks run, through one forward and one backward."""
    said: list[str] = []
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 1))
    for name, layer in (("layer 0", model[0]), ("layer 1", model[1])):
        layer.register_forward_pre_hook(lambda module, args, name=name: said.append(f"{name}: forward pre-hook"))
        layer.register_forward_hook(lambda module, args, out, name=name: said.append(f"{name}: forward hook"))
        layer.register_full_backward_pre_hook(lambda module, grad_out, name=name: said.append(
            f"{name}: backward pre-hook"))
        layer.register_full_backward_hook(lambda module, grad_in, grad_out, name=name: said.append(
            f"{name}: backward hook"))
    model(torch.ones(2, 3, requires_grad=True)).sum().backward()
    return "\n".join(said)
