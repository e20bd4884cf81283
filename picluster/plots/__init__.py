"""``picluster plot``: figures from what runs leave behind (matplotlib, PNG and SVG).

    plot(Path("sweep.csv"))        # Monte-Carlo sweep: time by samples (thesis dashed), speedup by nodes
    plot(Path("runs/20260101-1200"))  # a HAR run: curves, time per epoch, the nodes' CPU and memory
    plot(Path("har_scaling.csv"))  # a HAR scaling table: speedup and efficiency by workers

sources.py tells the kinds apart and reads them; sweep.py, training.py and timeline.py draw;
canvas.py holds the common set-up and writes each figure in every asked-for format.  Every
line carries a gid (``ours-4``, ``thesis-4``, ``val_acc``, ...), which the SVG keeps as an id.
"""

from picluster.plots.sources import plot

__all__ = ["plot"]
