"""A library's 2-D map: its bits' embeddings projected on their first two principal components.

People would rather look than read: bits about the same things sit together, and each point
links to the bits most like it. Only the bits the caller may see are projected, so the map of a
caller without a tag is the map of a host without the hidden bits.

Deterministic: the same visible bits always give the same picture. A library with more than
MAX_POINTS visible bits is mapped from a sample of them drawn with a fixed seed. The two
components come from a randomized SVD with a fixed seed (Halko, Martinsson & Tropp 2011: a few
power iterations on a small random subspace), which costs O(points x dimension) where an exact
SVD of 1,500 x 1,536 floats takes seconds; each component's sign is fixed so its largest
loading is positive.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from host.catalog.model_index import ModelIndex
from host.web.page.kept import Kept

MAX_POINTS = 1500
SAMPLE_SEED = 20240611
WIDTH, HEIGHT, MARGIN = 640, 400, 14  # the SVG's viewBox, in its own units
SUBSPACE = 10  # random directions the two components are found within
POWER_ITERATIONS = 4
MAPS_KEPT = 64


@dataclass(frozen=True)
class Projection:
    """What a map is drawn from, computed once per library, generation and visible tags."""

    rows: np.ndarray  # global rows of the model index, in index order
    xy: np.ndarray  # (len(rows), 2) in viewBox units, y downwards
    total: int  # visible bits of the library (rows may be a sample of them)
    variance: tuple[float, float]  # share of the variance along each axis
    ids: tuple[str, ...]
    titles: tuple[str, ...]
    private: tuple[bool, ...]  # the row carries an access tag (only ever true for a caller holding it)


@dataclass(frozen=True)
class MapPoint:
    x: float
    y: float
    id: str
    title: str
    like_href: str
    private: bool


@dataclass(frozen=True)
class LibraryMap:
    library: str
    href: str  # the map on its own, as image/svg+xml
    width: int
    height: int
    points: tuple[MapPoint, ...]
    shown: int
    total: int
    variance: tuple[float, float]
    radius: float  # of a point: larger when there are few


def point_radius(points: int) -> float:
    return 8.0 if points <= 40 else 6.0 if points <= 200 else 4.5


def principal_plane(vectors: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, tuple[float, float]]:
    """The rows of `vectors` (n x d) in the plane of their first two principal components, and
    the share of the total variance along each. Fewer than two components (one point, or all
    the same) come out as zeros."""
    centred = np.asarray(vectors, dtype=np.float64)
    centred = centred - centred.mean(axis=0)
    total = float(np.square(centred).sum())
    n, d = centred.shape
    if n < 2 or total <= 0:
        return np.zeros((n, 2)), (0.0, 0.0)
    width = min(SUBSPACE, n, d)
    basis, _ = np.linalg.qr(centred @ rng.standard_normal((d, width)))
    for _ in range(POWER_ITERATIONS):  # sharpen the subspace towards the top components
        basis, _ = np.linalg.qr(centred.T @ basis)
        basis, _ = np.linalg.qr(centred @ basis)
    _, singular, components = np.linalg.svd(basis.T @ centred, full_matrices=False)
    components = components[:2]
    signs = np.sign(components[np.arange(len(components)), np.abs(components).argmax(axis=1)])
    components = components * signs[:, None]
    coordinates = np.zeros((n, 2))
    coordinates[:, : len(components)] = centred @ components.T
    shares = [float(value) ** 2 / total for value in singular[:2]] + [0.0, 0.0]
    return coordinates, (shares[0], shares[1])


def to_view_box(coordinates: np.ndarray) -> np.ndarray:
    """Scaled alike on both axes (distances stay true), centred in the viewBox, y upwards on screen."""
    low, high = coordinates.min(axis=0), coordinates.max(axis=0)
    span = np.where(high - low > 0, high - low, 1.0)
    scale = min((WIDTH - 2 * MARGIN) / span[0], (HEIGHT - 2 * MARGIN) / span[1])
    middle = (low + high) / 2
    x = WIDTH / 2 + (coordinates[:, 0] - middle[0]) * scale
    y = HEIGHT / 2 - (coordinates[:, 1] - middle[1]) * scale
    return np.round(np.stack([x, y], axis=1), 1)


def project_library(index: ModelIndex, position: int, visible: np.ndarray | None) -> Projection:
    """The projection of the visible bits of `index.libraries[position]` (`visible`: the
    caller's bool mask over the index, None for every row)."""
    rows = np.sort(index.library_rows([position]))
    rows = rows if visible is None else rows[visible[rows]]
    total = len(rows)
    if total > MAX_POINTS:
        rows = np.sort(rows[np.random.default_rng(SAMPLE_SEED).choice(total, MAX_POINTS, replace=False)])
    coordinates, variance = principal_plane(index.gather(rows), np.random.default_rng(SAMPLE_SEED))
    located = [index.locate(row) for row in rows.tolist()]
    records = [segment.record(local) for segment, local in located]
    return Projection(
        rows=rows,
        xy=to_view_box(coordinates) if total else np.zeros((0, 2)),
        total=total,
        variance=variance,
        ids=tuple(segment.bit_id(local) for segment, local in located),
        titles=tuple(str(record["info"].get("title") or record["info"]["url"]) for record in records),
        private=tuple(bool(tag) for tag in (index.tag_ids[rows] != 0).tolist()),
    )


def library_map(projection: Projection, library: str, href: str, like_href: Callable[[str], str]) -> LibraryMap:
    points = tuple(
        MapPoint(float(x), float(y), bit_id, title, like_href(bit_id), private)
        for (x, y), bit_id, title, private in zip(projection.xy.tolist(), projection.ids, projection.titles,
                                                  projection.private)
    )
    return LibraryMap(library, href, WIDTH, HEIGHT, points, len(points), projection.total, projection.variance,
                      point_radius(len(points)))


class ProjectionCache(Kept[Projection]):
    """Projections by (generation, library, visible tags), shared by the threads that build pages."""

    def __init__(self, size: int = MAPS_KEPT) -> None:
        super().__init__(size)
