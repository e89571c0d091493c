"""The one PNG writer (transit/figures.py): a palette PNG that shows the chart matplotlib drew."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib
import numpy as np
from PIL import Image

from transit.figures import save_png

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after the backend


def test_a_chart_is_written_as_a_palette_png_with_the_same_pixels(tmp_path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 3))
    x = np.linspace(0, 10, 200)
    for k in range(5):
        ax.plot(x, np.sin(x + k), label=f"series {k}")
    ax.legend()
    rgba = io.BytesIO()
    fig.savefig(rgba, format="png", dpi=100)
    save_png(fig, tmp_path / "chart.png", dpi=100)
    plt.close(fig)
    with Image.open(tmp_path / "chart.png") as written, Image.open(rgba) as drawn:
        assert written.mode == "P" and written.size == drawn.size
        difference = np.abs(np.asarray(written.convert("RGBA"), dtype=int) - np.asarray(drawn.convert("RGBA"), dtype=int))
    assert difference.mean() < 1.0  # anti-aliased edges move a shade; the chart does not
    assert (tmp_path / "chart.png").stat().st_size < len(rgba.getvalue())
