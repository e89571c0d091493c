"""PNG output for every plot TRANSIT draws. A chart uses few colours: kept as a 256-colour palette
its file is about a quarter of matplotlib's RGBA one and looks the same, which keeps the
repository's plots small (bench/results) and the report's quick to copy off a cluster."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any


def save_png(figure: Any, path: Path | str, dpi: int) -> None:
    """Writes a matplotlib figure to path as a palette PNG (Pillow comes with matplotlib; imported
    here, as matplotlib is where it is drawn, so that the commands start without it)."""
    from PIL import Image

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    buffer.seek(0)
    with Image.open(buffer) as image:
        palette = palette_of(image)
    palette.save(path, format="PNG", optimize=True)


def palette_of(image: Any) -> Any:
    """The image on white, in the 256 colours that cover most of it (maximum coverage keeps a
    chart's background and lines exact; only anti-aliased edges move)."""
    from PIL import Image

    rgba = image.convert("RGBA")
    on_white = Image.alpha_composite(Image.new("RGBA", rgba.size, "white"), rgba).convert("RGB")
    return on_white.quantize(colors=256, method=Image.Quantize.MAXCOVERAGE)
