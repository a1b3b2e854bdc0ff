"""Wide Residual Networks: Zagoruyko & Komodakis 2016, "Wide Residual Networks", §2-3 and Table 1.

He et al. 2016's pre-activation units made ``k`` times wider and fewer: a 3×3 stem conv with 16 filters,
three stages of ``n`` units at 16k, 32k, 64k filters (stride 2 into stages 2 and 3), BN-ReLU, global average
pooling and a linear classifier; depth ``6n + 4`` counts the stem, two 3×3 convolutions per unit, the
classifier and the two 1×1 shortcut projections into stages 2 and 3 (WRN-28-10: n = 4). The unit is
B(3,3) with dropout between the convolutions (Fig. 1d, "wide-dropout"; the paper trains WRN-28-10 with
and without dropout 0.3, Table 6). Where the width changes the shortcut is a 1×1 convolution (option B) that
reads the pre-activated input, as in the authors' code; elsewhere the identity.
"""

from __future__ import annotations

import dataclasses

from torch import nn

from .blocks import PreActBasic
from .checks import check_positive, rate
from .layers import CifarSpec, Slot, build_cifar, conv3x3
from .registry import register, register_preset

ZAGORUYKO = "Zagoruyko & Komodakis 2016, Wide Residual Networks"


class WideBasic(PreActBasic):
    """Zagoruyko & Komodakis 2016, Fig. 1(d): ``y = shortcut(h) + conv3×3(dropout(ReLU(BN(conv3×3(h)))))`` with
    ``h = ReLU(BN(x))`` (the shortcut reads ``x`` itself where it is the identity)."""

    def __init__(
        self, cin: int, width: int, stride: int = 1, *, shortcut: str = "B", dropout: float = 0.0,
        drop_path: float = 0.0,
    ) -> None:
        super().__init__(cin, width, stride, shortcut=shortcut, drop_path=drop_path)
        body = self.body
        assert isinstance(body, nn.Sequential)
        body.insert(3, nn.Dropout(dropout))  # conv, BN, ReLU, [dropout], conv; forward is PreActBasic's


def wrn_units_per_stage(depth: int) -> int:
    """Units per stage of WRN-``depth``: depth = 6n+4 (Zagoruyko & Komodakis 2016, Table 1), e.g. 16, 28, 40."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 10 or (depth - 4) % 6:
        raise ValueError(f"Wide ResNet depth must be 6n+4 with n >= 1, e.g. 16, 22, 28, 40, got {depth!r}")
    return (depth - 4) // 6


@register("wrn", family="wrn", paper=f"{ZAGORUYKO}, Table 1", spec=CifarSpec(depth=28, shortcut="B"))
def wrn(spec: CifarSpec, *, widen_factor: int = 10, dropout: float = 0.0) -> nn.Module:
    """WRN-``depth``-``widen_factor`` of :class:`WideBasic` units; ``width`` (16) is the stem's filters and the
    first stage's before widening. ``dropout`` sits between each unit's convolutions (0.3 in the paper's
    dropout runs)."""
    n = wrn_units_per_stage(spec.depth)
    check_positive(widen_factor=widen_factor)
    if spec.block != "basic":
        raise ValueError(f"Wide ResNets here are built of B(3,3) units: block must be 'basic', got {spec.block!r}")
    rate("dropout", dropout)
    wide = dataclasses.replace(spec, width=spec.width * widen_factor)

    def unit(s: Slot) -> nn.Module:
        return WideBasic(s.cin, s.width, s.stride, shortcut=spec.shortcut, dropout=dropout, drop_path=s.drop_path)

    def head(features: int) -> nn.Module:
        return nn.Sequential(nn.BatchNorm2d(features), nn.ReLU())

    return build_cifar(wide, unit, what="Wide ResNet", stem=conv3x3, head_pre=head, n=n, stem_width=spec.width)


# Table 6 / Table 1 sizes (CIFAR-10): WRN-28-10 36.5M, WRN-16-8 11.0M, WRN-40-4 8.9M.
register_preset("wrn28_10", "wrn", depth=28, widen_factor=10, paper=f"{ZAGORUYKO}, Table 6 (WRN-28-10, 36.5M)")
register_preset("wrn16_8", "wrn", depth=16, widen_factor=8, paper=f"{ZAGORUYKO}, Table 6 (WRN-16-8, 11.0M)")
register_preset("wrn40_4", "wrn", depth=40, widen_factor=4, paper=f"{ZAGORUYKO}, Table 6 (WRN-40-4, 8.9M)")
