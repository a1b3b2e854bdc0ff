"""He 2016's full pre-activation ResNet whose shortcut mixes the zero-padding shortcut and a 1×1 projection:
s(x) = a·A(x) + (1 − a)·P(x), a learned (a = 1 at the start: `preact`'s shortcut)."""
import torch
from torch import nn

import variants


class MixShortcut(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:  # the factory's signature: (cin, cout, stride)
        super().__init__()
        self.identity = variants.make_shortcut("A", cin, cout, stride)  # x, or zero-padded where the shape changes
        self.project = variants.make_shortcut("C", cin, cout, stride, norm=False)  # 1×1 conv, no BN (pre-activation)
        self.a = nn.Parameter(torch.tensor(1.0))

    def residual_scalars(self) -> dict[str, torch.Tensor]:
        return {"alpha": self.a}  # recorded at every evaluation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a * self.identity(x) + (1 - self.a) * self.project(x)


@variants.register("preact_mix", family="preact_mix", paper="unpublished: a mixed shortcut",
                   spec=variants.CifarSpec(depth=20))
def preact_mix(spec: variants.CifarSpec) -> nn.Module:
    unit = variants.PREACT[spec.block]  # He 2016's full pre-activation unit (PreActBasic, or PreActBottleneck)
    return variants.build_cifar(spec, lambda s: unit(s.cin, s.width, s.stride, shortcut=MixShortcut,
                                                     first=s.position == 0, drop_path=s.drop_path),
                                stem=variants.preact_stem, head_pre=variants.preact_head)
