"""Locality: reorder and block work for the memory hierarchy.

Morton order (:mod:`propopt.locality.morton`)
    :func:`morton_keys`, :func:`morton_order`, :func:`bounding_box`,
    :func:`morton_digits`, :func:`morton_cells`, :func:`morton_decode`,
    :data:`MORTON_BITS`: Z-order keys for 2-D and 3-D points, the basis of an
    octree (cells are key prefixes, contiguous in Morton order).
Tiles (:mod:`propopt.locality.tiling`)
    :func:`tiles` (tile iterator), :func:`tiled_matmul` (naive, tiled, BLAS),
    :func:`tiled_pairwise` (full pair sum with or without source tiles).
Roofline (:mod:`propopt.locality.roofline`)
    :func:`roofline` measures this machine's compute and memory roofs and a
    few kernels (element-wise, fused, matrix product) -> :class:`RooflineReport`;
    :func:`plot_roofline` draws it (matplotlib).
"""

from .morton import (
    MORTON_BITS,
    bounding_box,
    morton_cells,
    morton_decode,
    morton_digits,
    morton_keys,
    morton_order,
)
from .roofline import KernelPoint, RooflineReport, plot_roofline, roofline
from .tiling import MATMUL_TILE, tiled_matmul, tiled_pairwise, tiles

__all__ = [
    "MATMUL_TILE",
    "MORTON_BITS",
    "KernelPoint",
    "RooflineReport",
    "bounding_box",
    "morton_cells",
    "morton_decode",
    "morton_digits",
    "morton_keys",
    "morton_order",
    "plot_roofline",
    "roofline",
    "tiled_matmul",
    "tiled_pairwise",
    "tiles",
]
